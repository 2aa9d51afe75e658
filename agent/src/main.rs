fn main() {
    println!("joiner-agent");
}
