//! `joiner_caller_identity` under the pinned Terraform (1.0.3 unless $TERRAFORM says
//! otherwise): a data source read through STS, proving the data source RPCs work.

use joiner_e2e::{Aws, MotoServer, Workspace};

#[test]
fn reads_the_emulator_account() {
    let moto = MotoServer::start();
    let tf = Workspace::new(&moto);
    tf.write_config(
        r#"data "joiner_caller_identity" "me" {}

output "account_id" {
  value = data.joiner_caller_identity.me.account_id
}
"#,
    );
    tf.apply();
    let from_sdk = Aws::new(&moto).account_id();
    assert_eq!(from_sdk, "123456789012", "moto's default account");
    assert_eq!(tf.output("account_id"), "123456789012");
    let values = tf.values("data.joiner_caller_identity.me");
    assert_eq!(values["account_id"], "123456789012");
    assert!(
        values["arn"]
            .as_str()
            .is_some_and(|a| a.contains("123456789012")),
        "arn: {}",
        values["arn"]
    );
    tf.plan_is_empty();
    tf.refresh_plan_is_empty();
}
