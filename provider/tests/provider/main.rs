//! The provider's library from outside: the DynamicValue codecs under generated values, and
//! the EKS token presented to API servers of the local world (kube-sim, and the real
//! control plane in `real_control_plane`).

mod codec;
mod eks_token_auth;
