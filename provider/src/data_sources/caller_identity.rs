//! `joiner_caller_identity`: the account, ARN and user id of the provider's credentials.

use crate::context::ProviderContext;
use crate::protocol::prelude::*;

pub struct CallerIdentity;

#[async_trait]
impl DataSource<ProviderContext> for CallerIdentity {
    fn type_name(&self) -> &'static str {
        "joiner_caller_identity"
    }

    fn schema(&self) -> Schema {
        Schema::new(0)
            .description("Who the provider is acting as (`sts:GetCallerIdentity`).")
            .attribute(
                Attribute::string("account_id")
                    .computed()
                    .description("AWS account id."),
            )
            .attribute(
                Attribute::string("arn")
                    .computed()
                    .description("ARN of the calling identity."),
            )
            .attribute(
                Attribute::string("principal_arn")
                    .computed()
                    .description(
                        "The IAM principal behind the credentials, as access entries and policies name \
                         it: an assumed-role session (`arn:aws:sts::…:assumed-role/R/session`) becomes the \
                         role's ARN, with its path (read with `iam:GetRole` when allowed); users and roles \
                         are returned as they are.",
                    ),
            )
            .attribute(
                Attribute::string("user_id")
                    .computed()
                    .description("Unique id of the calling identity."),
            )
    }

    async fn read(&self, ctx: &ProviderContext, _config: Value) -> Result<Value, Diagnostics> {
        let me = ctx.caller().await?;
        let principal = principal_arn(ctx, &me.arn).await;
        Ok(Value::object([
            ("account_id", Value::string(&me.account_id)),
            ("arn", Value::string(&me.arn)),
            ("principal_arn", Value::string(principal)),
            ("user_id", Value::string(&me.user_id)),
        ]))
    }
}

/// The role of an assumed-role session ARN, `None` for any other ARN:
/// `arn:aws:sts::1:assumed-role/deployer/ci` → (`aws`, `1`, `deployer`).
pub fn session_role(arn: &str) -> Option<(&str, &str, &str)> {
    let mut parts = arn.splitn(6, ':');
    let (_, partition, service, _, account, resource) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    let role = resource.strip_prefix("assumed-role/")?.split('/').next()?;
    (service == "sts" && !role.is_empty()).then_some((partition, account, role))
}

/// The caller as a principal: a session's role (its real ARN when `iam:GetRole` answers,
/// else the path-less form, which is right for roles without a path).
async fn principal_arn(ctx: &ProviderContext, arn: &str) -> String {
    let Some((partition, account, role)) = session_role(arn) else {
        return arn.to_string();
    };
    match ctx.aws.iam().get_role().role_name(role).send().await {
        Ok(out) => out
            .role()
            .map(|r| r.arn().to_string())
            .unwrap_or_else(|| format!("arn:{partition}:iam::{account}:role/{role}")),
        Err(e) => {
            tracing::debug!("iam:GetRole {role}: {e}; using the path-less role ARN");
            format!("arn:{partition}:iam::{account}:role/{role}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::session_role;

    #[test]
    fn session_arns_name_their_role() {
        assert_eq!(
            session_role("arn:aws:sts::123456789012:assumed-role/deployer/ci-42"),
            Some(("aws", "123456789012", "deployer"))
        );
        assert_eq!(
            session_role("arn:aws:iam::123456789012:user/local-admin"),
            None
        );
        assert_eq!(session_role("arn:aws:iam::123456789012:role/x"), None);
    }
}
