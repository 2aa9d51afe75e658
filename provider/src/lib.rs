//! terraform-provider-joiner: see ARCHITECTURE.md for the map.
