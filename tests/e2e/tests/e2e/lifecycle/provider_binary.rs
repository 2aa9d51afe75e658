//! The provider binary outside Terraform's control: run by hand, and in debug mode, where
//! Terraform attaches to it through TF_REATTACH_PROVIDERS.

use joiner_e2e::{provider_bin, DebugProvider, MotoServer, Workspace, PROVIDER_ADDRESS};
use std::process::Command;

#[test]
fn run_by_hand_it_explains_itself_and_fails() {
    let out = Command::new(provider_bin())
        .env_remove("TF_PLUGIN_MAGIC_COOKIE")
        .output()
        .expect("run the provider binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit status {}", out.status);
    assert!(
        stderr.contains("Terraform") && stderr.contains("plugin"),
        "no clear message: {stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "nothing on stdout (no handshake line): {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn debug_mode_prints_a_reattach_value_terraform_can_use() {
    let moto = MotoServer::start();
    let provider = DebugProvider::start(&moto.env());
    let value: serde_json::Value =
        serde_json::from_str(provider.reattach_value()).expect("reattach value is JSON");
    let entry = &value[PROVIDER_ADDRESS];
    assert_eq!(entry["ProtocolVersion"], 6, "{value}");
    assert_eq!(entry["Pid"], provider.pid(), "{value}");

    // This workspace has no dev_overrides: Terraform can only reach the provider through
    // the reattach value, and the AWS settings live in the provider's environment.
    let tf = Workspace::reattached(&provider);
    tf.write_config(
        r#"data "joiner_caller_identity" "me" {}

resource "joiner_interruption_queue" "q" {
  name = "debugged"
}

output "account_id" {
  value = data.joiner_caller_identity.me.account_id
}
"#,
    );
    let plan = tf.plan();
    assert_eq!(plan.actions("joiner_interruption_queue.q"), ["create"]);
    tf.apply();
    assert_eq!(tf.output("account_id"), "123456789012");
    tf.destroy();
}
