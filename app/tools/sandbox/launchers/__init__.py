"""Scripts the kernel spec runs on the host to start the sandbox (bubblewrap with its seccomp filter, and its
network): never imported by the app."""
