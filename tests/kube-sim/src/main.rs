fn main() {
    println!("kube-sim");
}
