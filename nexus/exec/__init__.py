"""Execution: KQL operators and result shaping, KML writes, META introspection."""
