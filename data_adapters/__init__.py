"""Adapters: one module per file-format family, each turning real files into typed examples."""
