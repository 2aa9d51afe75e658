fn main() {
    eprintln!("terraform-provider-joiner: this is a Terraform plugin, run it through terraform");
    std::process::exit(1);
}
