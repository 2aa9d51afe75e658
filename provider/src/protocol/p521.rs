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
    use p521::ecdsa::signature::Signer as _;

    #[test]
    fn verifies_p521_signatures_and_rejects_tampering() {
        let sk = p521::ecdsa::SigningKey::from_bytes(&[7u8; 66].into()).unwrap();
        let vk = p521::ecdsa::VerifyingKey::from(&sk);
        let public = vk.to_encoded_point(false);
        let sig: p521::ecdsa::Signature = sk.sign(b"handshake transcript");
        let der = sig.to_der();
        let alg = EcdsaP521Sha512;
        assert!(alg
            .verify_signature(public.as_bytes(), b"handshake transcript", der.as_bytes())
            .is_ok());
        assert!(alg
            .verify_signature(public.as_bytes(), b"another transcript", der.as_bytes())
            .is_err());
        assert!(alg
            .verify_signature(b"not a key", b"x", der.as_bytes())
            .is_err());
        assert!(algorithms()
            .supported_schemes()
            .contains(&SignatureScheme::ECDSA_NISTP521_SHA512));
    }
}
