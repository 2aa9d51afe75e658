//! The AWS query protocol's request body (`application/x-www-form-urlencoded`): decoding it
//! to ordered pairs and encoding it back after a rule rewrote it. Hand-written because the
//! whole job is two loops, not worth a dependency in a test crate.

/// Decodes `a=b&c=d` (with `+` as space and `%XX` escapes) into ordered pairs.
pub fn decode(body: &[u8]) -> Vec<(String, String)> {
    body.split(|b| *b == b'&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let mut it = pair.splitn(2, |b| *b == b'=');
            let k = unescape(it.next().unwrap_or_default());
            let v = unescape(it.next().unwrap_or_default());
            (k, v)
        })
        .collect()
}

/// Encodes pairs as a form body, escaping everything but RFC 3986 unreserved characters.
pub fn encode(params: &[(String, String)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in params.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        escape_into(k, &mut out);
        out.push('=');
        escape_into(v, &mut out);
    }
    out
}

fn unescape(s: &[u8]) -> String {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < s.len() => match (hex(s[i + 1]), hex(s[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn escape_into(s: &str, out: &mut String) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

/// Escapes text for an XML element body.
pub fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let pairs = vec![
            ("Action".to_string(), "CreateFleet".to_string()),
            ("Tag.1.Key".to_string(), "joiner.dev/cluster".to_string()),
            ("Value".to_string(), "a b&c=d%".to_string()),
        ];
        let body = encode(&pairs);
        assert_eq!(decode(body.as_bytes()), pairs);
        assert_eq!(
            decode(b"A=x+y&B=%2Fp%3d&C=&D"),
            vec![
                ("A".into(), "x y".into()),
                ("B".into(), "/p=".into()),
                ("C".into(), "".into()),
                ("D".into(), "".into())
            ]
        );
        assert_eq!(decode(b"A=100%"), vec![("A".into(), "100%".into())]);
    }
}
