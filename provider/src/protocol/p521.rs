//! ECDSA P-521 / SHA-512 signature verification for rustls.
//!
//! go-plugin (Terraform's plugin client) makes its auto-mTLS client certificate with a
//! P-521 key, and signs the TLS handshake with it. ring, our TLS crypto provider, has no
//! P-521, so without this the server cannot check the client's proof of key possession and
//! Terraform's client, seeing no acceptable signature scheme, sends no certificate at all.
//! The verification itself is RustCrypto's `p521`.

use p521::ecdsa::signature::Verifier as _;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::SignatureScheme;
use rustls_pki_types::{
    alg_id, AlgorithmIdentifier, InvalidSignature, SignatureVerificationAlgorithm,
};
use std::sync::OnceLock;

#[derive(Debug)]
struct EcdsaP521Sha512;

impl SignatureVerificationAlgorithm for EcdsaP521Sha512 {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), InvalidSignature> {
        let key =
            p521::ecdsa::VerifyingKey::from_sec1_bytes(public_key).map_err(|_| InvalidSignature)?;
        let sig = p521::ecdsa::Signature::from_der(signature).map_err(|_| InvalidSignature)?;
        key.verify(message, &sig).map_err(|_| InvalidSignature)
    }

    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::ECDSA_P521
    }

    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::ECDSA_SHA512
    }
}

static P521_SHA512: &[&dyn SignatureVerificationAlgorithm] = &[&EcdsaP521Sha512];

/// ring's verification algorithms plus ECDSA P-521 / SHA-512.
pub fn algorithms() -> WebPkiSupportedAlgorithms {
    static ALGS: OnceLock<WebPkiSupportedAlgorithms> = OnceLock::new();
    *ALGS.get_or_init(|| {
        let base = rustls::crypto::ring::default_provider().signature_verification_algorithms;
        let all: Vec<&'static dyn SignatureVerificationAlgorithm> = base
            .all
            .iter()
            .copied()
            .chain(P521_SHA512.iter().copied())
            .collect();
        let mapping: Vec<(
            SignatureScheme,
            &'static [&'static dyn SignatureVerificationAlgorithm],
        )> = base
            .mapping
            .iter()
            .copied()
            .chain([(SignatureScheme::ECDSA_NISTP521_SHA512, P521_SHA512)])
            .collect();
        WebPkiSupportedAlgorithms {
            all: Box::leak(all.into_boxed_slice()),
            mapping: Box::leak(mapping.into_boxed_slice()),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(parts: &[&str]) -> Vec<u8> {
        hex::decode(parts.concat()).unwrap()
    }

    /// A signature made with OpenSSL (`openssl dgst -sha512 -sign` with a secp521r1 key),
    /// so the test checks interoperability, not our code against itself.
    #[test]
    fn verifies_openssl_p521_signatures_and_rejects_tampering() {
        let public = unhex(&[
            "04004f5404173909b21c46b6e81d6fa40d077ef6ff645d61d65a4ae95b47ec32",
            "54d2331231cd54ad462d984dec3552fd7f7dc8d82f6da59b6e03a0dc2b2d286b",
            "d4fd3401b1deaf4ea508968891e37361890623e6b81d8ce0eda9872bc445a4f8",
            "7fec40a121ea69e9562568b5ee23b02d777f06cdefdf1b39dc947def4d7de231",
            "1e549f9bd9",
        ]);
        let sig = unhex(&[
            "30818802420195e2ad4ba26559b78be78ce2e088c51b2754cdd6790a67f8f4f8",
            "7cc81b67a53d37814d9c50c9af4d2b1e833a33c8c2545159ef4e50d585f5f6e8",
            "75f6a544cf300f024200cc1c0c3be74fcaaa3d420f975305bdcf69d8393a70e2",
            "253c06ec21a4f6b6bd9bdc5fca8c974f7b47d3e1814dacb9358071e713d3dad8",
            "1b2b8957ae1707f0b98bba",
        ]);
        let alg = EcdsaP521Sha512;
        assert!(alg
            .verify_signature(&public, b"handshake transcript", &sig)
            .is_ok());
        assert!(alg
            .verify_signature(&public, b"another transcript", &sig)
            .is_err());
        assert!(alg
            .verify_signature(b"not a key", b"handshake transcript", &sig)
            .is_err());
        assert!(alg
            .verify_signature(&public, b"handshake transcript", &sig[1..])
            .is_err());
        assert!(algorithms()
            .supported_schemes()
            .contains(&SignatureScheme::ECDSA_NISTP521_SHA512));
    }
}
