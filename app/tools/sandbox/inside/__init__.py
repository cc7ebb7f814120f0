"""Code that runs inside the sandbox, as scripts started by the kernel spec: never imported by the app, and
written for the standard library only (the sandbox sees the interpreter, not the app)."""
