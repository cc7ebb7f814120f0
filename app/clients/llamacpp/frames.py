"""What the app and its llama.cpp runner process say to each other, and how a runner's end is put into words.

Messages are JSON objects, one per `Connection.send_bytes` frame (never pickle: a runner that a hostile GGUF took
over must not be able to run code in the app by what it sends back). Each has an `op`:

app → runner: the load settings first (no op), then
- `generate` {id, tokens, params, stop_ids, grammar, max_new_tokens}: one reply;
- `abort` {id}: stop that reply (or drop it if it has not started);
- `warm` {tokens}: read these into the context while no reply waits (a turn's common beginning);
- `stats` {id}: the prompt cache's figures;
- `shutdown`.

runner → app: `ready` {pid, n_ctx, n_vocab, eos, cache} or `failed` {error} after loading, then per reply
`started` {id, cached}, `text` {id, text, n} (n tokens), `done` {id, finish, text, n, usage} or `error` {id, error},
`stats` {id, …PromptCacheStats}, and `warmed` {tokens} (how many the context holds after a warm-up).
"""

from __future__ import annotations

import signal

MAX_MESSAGE_BYTES = 64 * 2**20  # a prompt of a million tokens fits; a runner gone wrong cannot send more
WARM_CHUNK = 128  # tokens a warm-up reads before it looks whether a reply waits (about half a second here)
FLUSH_MS = 40.0  # tokens generated within this time after the last message go together (the first one at once)

_SIGNALS = {
    signal.SIGSEGV: "a segmentation fault (SIGSEGV): a bug in llama.cpp or a damaged model file",
    signal.SIGILL: "an instruction this CPU cannot run (SIGILL): the binding was built for another CPU; rebuild it "
                   "with `make setup-llamacpp`",
    signal.SIGABRT: "an abort (SIGABRT): llama.cpp stopped on an error of its own",
    signal.SIGBUS: "a bus error (SIGBUS): the model file changed or shrank while it was in use",
    signal.SIGFPE: "an arithmetic fault (SIGFPE)",
    signal.SIGKILL: "SIGKILL: the system ran out of memory (the OOM killer), or it was killed from outside",
}


def exit_reason(returncode: int | None) -> str:
    """How a runner ended, for people: "it was ended by a segmentation fault (SIGSEGV): …"."""
    if returncode is None:
        return "it stopped answering"
    if returncode < 0:
        try:
            number = signal.Signals(-returncode)
        except ValueError:
            return f"it was ended by signal {-returncode}"
        return f"it was ended by {_SIGNALS.get(number, number.name)}"
    return f"it exited with status {returncode}"
