//! The proxy against a real emulator, over plain HTTP/1.1 with EC2 query-protocol bodies
//! (the SDK-level proof, with ICE and retries, is in `agent/tests/cloud_ec2.rs`).

use std::io::{Read, Write};
use std::net::TcpStream;

use fault_proxy::FaultProxy;
use joiner_test_support::MotoServer;

fn post(endpoint: &str, body: &str) -> (u16, String) {
    let addr = endpoint.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded; \
         charset=utf-8\r\nAuthorization: AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/\
         ec2/aws4_request, SignedHeaders=host, Signature=x\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out
        .split_once("\r\n\r\n")
        .map(|x| x.1)
        .unwrap_or("")
        .to_string();
    (status, body)
}

#[test]
fn forwards_throttles_and_half_succeeds() {
    let moto = MotoServer::start();
    let proxy = FaultProxy::start(&moto.endpoint());
    let q = "Action=DescribeRegions&Version=2016-11-15";
    let (status, body) = post(&proxy.endpoint(), q);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("us-east-1"), "{body}");

    proxy.throttle("DescribeRegions", 2);
    for _ in 0..2 {
        let (status, body) = post(&proxy.endpoint(), q);
        assert_eq!(status, 503);
        assert!(body.contains("<Code>RequestLimitExceeded</Code>"), "{body}");
    }
    assert_eq!(post(&proxy.endpoint(), q).0, 200, "only twice");
    assert_eq!(proxy.count("DescribeRegions"), 4);

    // Half-succeed: the key pair exists in the emulator although the caller got a 500.
    proxy.half_succeed("CreateKeyPair", 1);
    let (status, body) = post(
        &proxy.endpoint(),
        "Action=CreateKeyPair&Version=2016-11-15&KeyName=half",
    );
    assert_eq!(status, 500);
    assert!(body.contains("InternalError"), "{body}");
    let (status, body) = post(
        &moto.endpoint(),
        "Action=DescribeKeyPairs&Version=2016-11-15",
    );
    assert_eq!(status, 200);
    assert!(body.contains("<keyName>half</keyName>"), "{body}");
    let rec = proxy.requests_for("CreateKeyPair");
    assert_eq!(rec[0].param("KeyName"), Some("half"));
    assert_eq!(rec[0].fault.as_deref(), Some("half-succeed"));
}
