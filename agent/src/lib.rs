//! joiner-agent: see ARCHITECTURE.md for the map.
