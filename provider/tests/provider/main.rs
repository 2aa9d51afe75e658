//! The provider's library from outside: the DynamicValue codecs under generated values,
//! the EKS token presented to API servers of the local world (kube-sim, and the real
//! control plane in `real_control_plane`), and the NodePool plan preview held to the
//! agent's own disruption pass.

mod codec;
mod eks_token_auth;
mod plan_preview;
