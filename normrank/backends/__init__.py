"""Alternative search backends answering to the core kernels' names: torch (GPU/CPU), Qdrant."""
