"""Small shared helpers for the lessons. Import `common.device` before anything imports triton."""
