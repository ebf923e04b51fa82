"""Property-based tests (Hypothesis) of the lease operations and the surfaces."""
