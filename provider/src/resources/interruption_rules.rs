//! (empty: being written)
