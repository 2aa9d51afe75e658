//! `sim-pod`: a tiny container program for kube-sim's process-runner tests.
//!
//! It prints its arguments and environment (so a test can read, through `kubectl logs`,
//! what the runner gave it), then either exits with a chosen code or serves `/readyz` and
//! `/healthz` on `$POD_IP:$SIM_POD_PORT` until SIGTERM.
//!
//! ```text
//! sim-pod [serve] [--ignore-sigterm]   serve until SIGTERM (exit 0 on SIGTERM)
//! sim-pod exit CODE                    print, then exit with CODE
//! ```

use std::io::{Read, Write};
use std::net::TcpListener;

fn print_identity(args: &[String]) {
    println!("sim-pod: args={}", serde_json::json!(args));
    let mut vars: Vec<(String, String)> = std::env::vars().collect();
    vars.sort();
    for (k, v) in vars {
        println!("env {k}={v}");
    }
    eprintln!("sim-pod: stderr is captured too");
    let _ = std::io::stdout().flush();
}

fn serve(addr: &str) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr)?;
    println!("sim-pod: serving on {}", listener.local_addr()?);
    let _ = std::io::stdout().flush();
    for conn in listener.incoming() {
        let Ok(mut s) = conn else { continue };
        let mut buf = [0u8; 2048];
        let n = s.read(&mut buf).unwrap_or(0);
        let req = String::from_utf8_lossy(&buf[..n]);
        let path = req.split_whitespace().nth(1).unwrap_or("/");
        let (code, body) = match path {
            "/readyz" | "/healthz" => ("200 OK", "ok"),
            _ => ("404 Not Found", "not found"),
        };
        let _ = write!(
            s,
            "HTTP/1.1 {code}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    print_identity(&args);
    match args.first().map(String::as_str) {
        Some("exit") => {
            let code = args.get(1).and_then(|c| c.parse().ok()).unwrap_or(0);
            println!("sim-pod: exiting with {code}");
            std::process::exit(code);
        }
        Some("serve") | None | Some("--ignore-sigterm") => {}
        Some(other) => {
            eprintln!("sim-pod: unknown mode {other:?}; use serve or exit CODE");
            std::process::exit(64);
        }
    }
    let ignore_term = args.iter().any(|a| a == "--ignore-sigterm");
    let ip = std::env::var("POD_IP").unwrap_or_else(|_| "127.0.0.1".into());
    let port = std::env::var("SIM_POD_PORT").unwrap_or_else(|_| "8081".into());
    let addr = format!("{ip}:{port}");
    std::thread::spawn(move || {
        if let Err(e) = serve(&addr) {
            eprintln!("sim-pod: serve {addr}: {e}");
            std::process::exit(70);
        }
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install SIGTERM handler");
    loop {
        term.recv().await;
        println!("sim-pod: SIGTERM");
        let _ = std::io::stdout().flush();
        if !ignore_term {
            std::process::exit(0);
        }
    }
}
