"""GPU kernels (Triton), each beside a pure-torch reference that is the CPU fallback and test oracle."""
