//! Reattach mode: the provider runs on its own (`--debug`) and Terraform connects to it
//! through `TF_REATTACH_PROVIDERS`, the way debuggers and long-lived test servers do.

use joiner_test_support::provider_bin;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A provider started with `--debug`, killed on drop.
pub struct DebugProvider {
    child: Child,
    reattach: String,
    output: Arc<Mutex<String>>,
}

impl DebugProvider {
    /// Starts the provider with `env` (the AWS settings live in the provider process in
    /// this mode, not in Terraform's) and waits up to 30 s for its reattach line.
    pub fn start(env: &[(String, String)]) -> DebugProvider {
        let bin = provider_bin();
        let mut cmd = Command::new(bin);
        cmd.arg("--debug")
            .env_remove("TF_PLUGIN_MAGIC_COOKIE")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("start {} --debug: {e}", bin.display()));
        let output = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        // Both streams are scanned: which one carries the line is the provider's choice.
        for stream in [
            Box::new(child.stdout.take().expect("stdout")) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().expect("stderr")),
        ] {
            let (tx, output) = (tx.clone(), output.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    output.lock().unwrap().push_str(&format!("{line}\n"));
                    if let Some(value) = reattach_value(&line) {
                        let _ = tx.send(value);
                    }
                }
            });
        }
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(reattach) => DebugProvider {
                child,
                reattach,
                output,
            },
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{} --debug printed no TF_REATTACH_PROVIDERS line within 30 s; it printed:\n{}",
                    bin.display(),
                    output.lock().unwrap()
                );
            }
        }
    }

    /// The JSON value for `TF_REATTACH_PROVIDERS`.
    pub fn reattach_value(&self) -> &str {
        &self.reattach
    }

    /// Everything the provider printed so far.
    pub fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for DebugProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Pulls the value out of a line such as
/// `TF_REATTACH_PROVIDERS='{"registry.terraform.io/joiner/joiner":{...}}'`.
fn reattach_value(line: &str) -> Option<String> {
    let (_, rest) = line.split_once("TF_REATTACH_PROVIDERS=")?;
    let rest = rest.trim();
    let unquoted = rest
        .strip_prefix('\'')
        .and_then(|r| r.strip_suffix('\''))
        .or_else(|| rest.strip_prefix('"').and_then(|r| r.strip_suffix('"')))
        .unwrap_or(rest);
    serde_json::from_str::<serde_json::Value>(unquoted)
        .ok()
        .filter(|v| v.is_object())
        .map(|_| unquoted.to_string())
}

#[cfg(test)]
mod tests {
    use super::reattach_value;

    #[test]
    fn extracts_quoted_and_bare_values() {
        let v = r#"{"registry.terraform.io/joiner/joiner":{"Protocol":"grpc","ProtocolVersion":6,"Pid":1,"Test":true,"Addr":{"Network":"unix","String":"/tmp/x"}}}"#;
        assert_eq!(
            reattach_value(&format!("\tTF_REATTACH_PROVIDERS='{v}'")).as_deref(),
            Some(v)
        );
        assert_eq!(
            reattach_value(&format!("TF_REATTACH_PROVIDERS={v}")).as_deref(),
            Some(v)
        );
        assert_eq!(reattach_value("TF_REATTACH_PROVIDERS='not json'"), None);
        assert_eq!(reattach_value("nothing here"), None);
    }
}
