"""I/O sources: the only modules that talk to the network, the kernel or the GPU driver."""
