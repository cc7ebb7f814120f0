"""Settings read from environment variables, in one place, so the pages, the server and the tests agree."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


def cache_dir() -> Path:
    """Where converted models live; DEMO_CACHE_DIR overrides the XDG cache location."""
    explicit = os.environ.get("DEMO_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "composite-demo"


def state_dir() -> Path:
    """Where the app keeps what it generated for itself (the MCP server's API key); the XDG state location."""
    base = os.environ.get("XDG_STATE_HOME") or "~/.local/state"
    return Path(base).expanduser() / "composite-demo"


def read_key_file(path: Path, what: str = "the key file") -> str:
    """A secret kept in a file (an API key: never on a command line, which every user of the machine can read).
    ValueError saying what is wrong with it; a warning on stderr when other users can read the file."""
    import stat

    try:
        key = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"Cannot read {what} {path}: {exc}.") from None
    if not key:
        raise ValueError(f"{what.capitalize()} {path} is empty: write the key in it.")
    if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        print(f"Warning: {what} {path} can be read by other users of this machine: chmod 600 it.", file=sys.stderr)
    return key


def mermaid_script() -> Path:
    """The Mermaid library previews draw diagrams with: what `make setup` puts in the environment's share/ folder
    (npm), or DEMO_MERMAID_JS."""
    explicit = os.environ.get("DEMO_MERMAID_JS")
    return Path(explicit).expanduser() if explicit else Path(sys.prefix) / "share" / "mermaid" / "mermaid.min.js"


def speech_model_setting() -> str:
    """DEMO_SPEECH_MODEL: the speech-recognition model voice input uses (a folder, or a Hub id already in the Hugging
    Face cache); "" lets the model library choose one (app/speech/transcriber.py)."""
    return os.environ.get("DEMO_SPEECH_MODEL", "").strip()


def sessions_dir() -> Path:
    """Where each browser session's Python folder is made; DEMO_SESSIONS_DIR overrides the system temp folder."""
    return Path(os.environ.get("DEMO_SESSIONS_DIR") or Path(tempfile.gettempdir()) / "composite-demo-sessions")


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    return float(raw) if raw else default


_ON = ("1", "true", "yes", "on")


def _flag(name: str) -> bool:
    """An on/off setting, off unless asked for: on for 1, true, yes or on (any case, surrounding spaces ignored);
    unset, empty or anything else is off."""
    return os.environ.get(name, "").strip().lower() in _ON


def comma_list(raw: str) -> tuple[str, ...]:
    """A comma-separated setting's entries, stripped, without empty ones."""
    return tuple(entry for entry in (item.strip() for item in raw.split(",")) if entry)


@dataclass(frozen=True)
class VLLMOptions:
    """vLLM engine options (ignored by the other backends)."""

    gpu_memory_utilization: float = 0.0  # share of GPU memory vLLM takes (of RAM on CPU); 0: 0.9 on GPU, 0.3 on CPU
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    distributed_executor_backend: str = "mp"  # "mp" (one machine) or "ray" (several)
    enforce_eager: bool = False
    quantization: str = ""  # "" lets vLLM read it from the model's config (awq, gptq, fp8...)

    @classmethod
    def from_env(cls) -> VLLMOptions:
        return cls(
            gpu_memory_utilization=float(os.environ.get("DEMO_VLLM_GPU_MEMORY_UTILIZATION", "0") or 0),
            tensor_parallel_size=_int("DEMO_VLLM_TENSOR_PARALLEL_SIZE", 1),
            pipeline_parallel_size=_int("DEMO_VLLM_PIPELINE_PARALLEL_SIZE", 1),
            distributed_executor_backend=os.environ.get("DEMO_VLLM_EXECUTOR", "mp") or "mp",
            enforce_eager=_flag("DEMO_VLLM_ENFORCE_EAGER"),
            quantization=os.environ.get("DEMO_VLLM_QUANTIZATION", ""),
        )


@dataclass(frozen=True)
class ModelSettings:
    """Which backend and model. Frozen and hashable: it is the cache key of the loaded backend."""

    backend: str = "hf"
    model_path: str = ""  # hf, vllm: a local model folder ("" = the embedded SmolLM2)
    device: str = "auto"
    dtype: str = "auto"
    max_context_tokens: int = 0  # 0: take the model's own context window
    hf_max_batch: int = 8  # hf: the most answers decoded together (continuous batching); 1: one after another
    hf_prefill_chunk: int = 512  # hf: prompt tokens read per step while others decode (a long prompt's stall)
    prompt_cache_mb: int = 1024  # hf, llamacpp: memory for the keys/values of earlier prompts (0: no prompt cache)
    llamacpp_threads: int = 0  # llamacpp: CPU threads (0: one per physical core, as llama-server picks)
    llamacpp_gpu_layers: int = 0  # llamacpp: layers offloaded to the GPU (-1: all)
    api_base_url: str = "http://127.0.0.1:8000/v1"  # openai: any OpenAI-compatible server
    api_key: str = ""
    api_model: str = ""  # openai: "" = the first model the server lists
    vllm: VLLMOptions = VLLMOptions()

    @classmethod
    def from_env(cls, choose_backend: Callable[[str], str]) -> ModelSettings:
        """`choose_backend(model_path)` names the engine: app.clients.choice.default_backend (DEMO_BACKEND, or the
        fastest engine that runs here). It is passed in because which engines run here is the clients' knowledge,
        and config sits below them."""
        model_path = os.environ.get("DEMO_MODEL", "")
        return cls(
            backend=choose_backend(model_path),
            model_path=model_path,
            device=os.environ.get("DEMO_DEVICE", "auto"),
            dtype=os.environ.get("DEMO_DTYPE", "auto"),
            max_context_tokens=_int("DEMO_MAX_CONTEXT", 0),
            hf_max_batch=max(1, _int("DEMO_HF_MAX_BATCH", cls.hf_max_batch)),
            hf_prefill_chunk=max(16, _int("DEMO_HF_PREFILL_CHUNK", cls.hf_prefill_chunk)),
            prompt_cache_mb=max(0, _int("DEMO_PROMPT_CACHE_MB", cls.prompt_cache_mb)),
            llamacpp_threads=max(0, _int("DEMO_LLAMACPP_THREADS", 0)),
            llamacpp_gpu_layers=_int("DEMO_LLAMACPP_GPU_LAYERS", 0),
            api_base_url=os.environ.get("DEMO_API_BASE_URL", cls.api_base_url),
            api_key=os.environ.get("DEMO_API_KEY", ""),
            api_model=os.environ.get("DEMO_API_MODEL", ""),
            vllm=VLLMOptions.from_env(),
        )


@dataclass(frozen=True)
class DocumentSettings:
    """Uploaded documents: how much text goes into the conversation, and the limits that keep a hostile file
    (a zip bomb, a PDF of huge compressed streams) from taking all memory or time before it is refused."""

    max_chars: int = 12000  # how much of one document goes into the conversation; reading stops there
    max_unpacked_mb: int = 100  # all one document unpacks to: a DOCX/PPTX's parts, the contents of a PDF's pages
    max_part_mb: int = 50  # one part unpacked: a file inside a DOCX/PPTX, a compressed stream inside a PDF
    max_compression_ratio: int = 100  # unpacked : packed size of one DOCX/PPTX part (zip bombs reach ~1000)
    max_parts: int = 10000  # files inside one DOCX/PPTX
    max_pdf_pages: int = 2000  # pages read from one PDF (pages without text still take time)

    @classmethod
    def from_env(cls) -> DocumentSettings:
        # Empty means the default; anything else must be an integer (a typo fails loudly, not silently).
        return cls(
            max_chars=_int("DEMO_DOCUMENT_MAX_CHARS", cls.max_chars),
            max_unpacked_mb=_int("DEMO_DOCUMENT_MAX_UNPACKED_MB", cls.max_unpacked_mb),
            max_part_mb=_int("DEMO_DOCUMENT_MAX_PART_MB", cls.max_part_mb),
            max_compression_ratio=_int("DEMO_DOCUMENT_MAX_COMPRESSION_RATIO", cls.max_compression_ratio),
            max_parts=_int("DEMO_DOCUMENT_MAX_PARTS", cls.max_parts),
            max_pdf_pages=_int("DEMO_DOCUMENT_MAX_PDF_PAGES", cls.max_pdf_pages),
        )


@dataclass(frozen=True)
class KnowledgeSettings:
    """Documents read into passages for search (app/knowledge): how they are cut, and what one user may keep."""

    passage_chars: int = 1200  # a passage's length; a prompt holds a few of them with their sources
    overlap_chars: int = 200  # each passage starts with the end of the one before it
    max_file_mb: int = 50  # one file as uploaded
    max_passages_per_document: int = 20_000  # about 24 million characters
    max_documents: int = 1000  # per user
    max_passages: int = 200_000  # per user
    max_mb: int = 1000  # per user, the files as uploaded
    min_similarity: float = 0.3  # search by meaning: the least cosine similarity of a passage to the question

    @classmethod
    def from_env(cls) -> KnowledgeSettings:
        # Passages of 200 to 20,000 characters, overlapping by less than half: outside that, search breaks down.
        passage = min(max(_int("DEMO_KNOWLEDGE_PASSAGE_CHARS", cls.passage_chars), 200), 20_000)
        return cls(
            passage_chars=passage,
            overlap_chars=min(max(_int("DEMO_KNOWLEDGE_OVERLAP_CHARS", cls.overlap_chars), 0), passage // 2 - 1),
            max_file_mb=_int("DEMO_KNOWLEDGE_MAX_FILE_MB", cls.max_file_mb),
            max_passages_per_document=_int("DEMO_KNOWLEDGE_MAX_DOCUMENT_PASSAGES", cls.max_passages_per_document),
            max_documents=_int("DEMO_KNOWLEDGE_MAX_DOCUMENTS", cls.max_documents),
            max_passages=_int("DEMO_KNOWLEDGE_MAX_PASSAGES", cls.max_passages),
            max_mb=_int("DEMO_KNOWLEDGE_MAX_MB", cls.max_mb),
            min_similarity=_float("DEMO_EMBEDDING_MIN_SIMILARITY", cls.min_similarity),
        )


@dataclass(frozen=True)
class ImageSettings:
    """Limits on images users attach (and the API server receives), applied by app/domain/media.py before an image is
    decoded, stored or shown to a model. Pillow's own decompression-bomb limit (about 89 million pixels) caps
    max_pixels as well."""

    max_mb: float = 20  # one image file
    max_message_mb: float = 50  # all images of one message together
    max_per_message: int = 8
    max_pixels: int = 50_000_000  # width * height, checked from the header before decoding (decompression bombs)
    max_side: int = 2048  # longer side after decoding; bigger images are scaled down
    max_per_prompt: int = 4  # images one prompt may show a vision model (vLLM's limit_mm_per_prompt); older: a note
    allow_urls: bool = False  # the API server may fetch http(s) image URLs (through the SSRF guard)

    @classmethod
    def from_env(cls) -> ImageSettings:
        return cls(
            max_mb=_float("DEMO_IMAGE_MAX_MB", cls.max_mb),
            max_message_mb=_float("DEMO_IMAGE_MAX_MESSAGE_MB", cls.max_message_mb),
            max_per_message=_int("DEMO_IMAGE_MAX_PER_MESSAGE", cls.max_per_message),
            max_pixels=_int("DEMO_IMAGE_MAX_PIXELS", cls.max_pixels),
            max_side=_int("DEMO_IMAGE_MAX_SIDE", cls.max_side),
            max_per_prompt=_int("DEMO_MAX_IMAGES_PER_PROMPT", cls.max_per_prompt),
            allow_urls=_flag("DEMO_IMAGE_URLS"),
        )


@dataclass(frozen=True)
class DatabaseSettings:
    """Where conversations are saved: DEMO_DATABASE_URL for a shared deployment (postgresql+psycopg://user:password@
    host/db), else a SQLite file in the cache folder, which suits one machine."""

    url: str

    @classmethod
    def from_env(cls) -> DatabaseSettings:
        explicit = os.environ.get("DEMO_DATABASE_URL", "").strip()
        return cls(url=explicit or f"sqlite:///{cache_dir() / 'conversations.db'}")


@dataclass(frozen=True)
class ResponseStoreSettings:
    """The API server's stored responses (`POST /v1/responses` with store=true, app/storage/responses.py), in the
    conversation database. A response is kept `retention_days` after it was created (30, as OpenAI keeps them),
    then it is gone: unreadable at once, deleted soon after. 0 means nothing is stored at all (earlier stored
    responses are then unreadable too). A follow-up may continue a chain of at most `max_chain` responses holding
    at most `max_chain_mb` of stored JSON together (sized from each row's recorded size, before any is loaded).
    The whole store keeps at most `max_responses` responses and `max_total_mb` of JSON, of every owner: saving past
    either deletes the oldest."""

    retention_days: float = 30.0  # DEMO_RESPONSES_RETENTION_DAYS
    max_chain: int = 1000  # DEMO_RESPONSES_MAX_CHAIN
    max_chain_mb: float = 32.0  # DEMO_RESPONSES_MAX_CHAIN_MB
    max_responses: int = 10_000  # DEMO_RESPONSES_MAX_STORED
    max_total_mb: float = 1024.0  # DEMO_RESPONSES_MAX_STORE_MB

    def __post_init__(self) -> None:
        if not 0 <= self.retention_days < float("inf"):  # NaN fails too
            raise ValueError(f"DEMO_RESPONSES_RETENTION_DAYS must be a finite number >= 0, not {self.retention_days!r}")
        if self.max_chain < 1:
            raise ValueError(f"DEMO_RESPONSES_MAX_CHAIN must be at least 1, not {self.max_chain!r}")
        if self.max_responses < 1:
            raise ValueError(f"DEMO_RESPONSES_MAX_STORED must be at least 1, not {self.max_responses!r}")
        for name, value in (("DEMO_RESPONSES_MAX_CHAIN_MB", self.max_chain_mb),
                            ("DEMO_RESPONSES_MAX_STORE_MB", self.max_total_mb)):
            if not 0 < value < float("inf"):
                raise ValueError(f"{name} must be a finite number > 0, not {value!r}")

    @property
    def max_chain_bytes(self) -> int:
        return int(self.max_chain_mb * 2**20)

    @property
    def max_total_bytes(self) -> int:
        return int(self.max_total_mb * 2**20)

    @classmethod
    def from_env(cls) -> ResponseStoreSettings:
        return cls(
            retention_days=_float("DEMO_RESPONSES_RETENTION_DAYS", cls.retention_days),
            max_chain=_int("DEMO_RESPONSES_MAX_CHAIN", cls.max_chain),
            max_chain_mb=_float("DEMO_RESPONSES_MAX_CHAIN_MB", cls.max_chain_mb),
            max_responses=_int("DEMO_RESPONSES_MAX_STORED", cls.max_responses),
            max_total_mb=_float("DEMO_RESPONSES_MAX_STORE_MB", cls.max_total_mb),
        )


@dataclass(frozen=True)
class WeatherSettings:
    """Where get_weather asks: Open-Meteo's free public API, or a mirror (or a local stand-in in tests)."""

    geocoding_url: str = "https://geocoding-api.open-meteo.com/v1/search"
    forecast_url: str = "https://api.open-meteo.com/v1/forecast"

    @classmethod
    def from_env(cls) -> WeatherSettings:
        return cls(
            geocoding_url=os.environ.get("DEMO_WEATHER_GEOCODING_URL", cls.geocoding_url),
            forecast_url=os.environ.get("DEMO_WEATHER_FORECAST_URL", cls.forecast_url),
        )


@dataclass(frozen=True)
class ImageApiSettings:
    """An images API speaking OpenAI's `POST /images/generations`; without a URL generate_image is not offered."""

    url: str = ""  # base URL, e.g. https://open.bigmodel.cn/api/paas/v4
    api_key: str = ""
    model: str = "cogview-4"
    size: str = "1024x1024"

    @classmethod
    def from_env(cls) -> ImageApiSettings:
        # Stripped: a stray space or newline pasted with a key would otherwise be sent in the header.
        return cls(
            url=os.environ.get("DEMO_IMAGE_API_URL", cls.url).strip(),
            api_key=os.environ.get("DEMO_IMAGE_API_KEY", cls.api_key).strip(),
            model=os.environ.get("DEMO_IMAGE_MODEL", cls.model).strip(),
            size=os.environ.get("DEMO_IMAGE_SIZE", cls.size).strip(),
        )


@dataclass(frozen=True)
class BrowserSettings:
    """The web tools: which search service, and which local or private hosts they may open anyway."""

    searxng_url: str = ""  # "": search with DuckDuckGo
    allow: tuple[str, ...] = ()  # lower-case host names, IP addresses or CIDR networks

    @classmethod
    def from_env(cls) -> BrowserSettings:
        return cls(
            searxng_url=os.environ.get("DEMO_SEARXNG_URL", cls.searxng_url),
            allow=comma_list(os.environ.get("DEMO_BROWSER_ALLOW", "").lower()),
        )


@dataclass(frozen=True)
class McpSettings:
    """Tools from MCP servers: the administrator's mcp.json (DEMO_MCP_CONFIG, else ./mcp.json when there is one;
    none: no configured servers) and how long a server may take."""

    config_path: str = ""
    call_timeout_s: float = 60.0  # one tool call; past it the call is cancelled and the model reads an error
    connect_timeout_s: float = 15.0  # starting or reaching a server, its handshake and its tool list
    # The app's own MCP server over HTTP (app/frontends/mcp/server.py) requires this key as a bearer token (empty: one
    # it generates) and accepts browser requests from these origins only.
    server_api_key: str = field(default="", repr=False)
    server_allow_origins: tuple[str, ...] = ()
    # Servers that need sign-in (OAuth, app/mcp_client/oauth.py): the authorization server sends the browser back to
    # public_url; a sign-in not finished within sign_in_timeout_s is given up; tokens are encrypted with secret_key
    # (a Fernet key; "": sign-in is not offered). Kept out of repr: settings get logged and shown.
    public_url: str = "http://localhost:8501/"
    sign_in_timeout_s: float = 600.0
    secret_key: str = field(default="", repr=False)
    # One message from a Streamable HTTP server (a JSON body, one SSE event), read no further than this; and the
    # images one tool result may show (the rest are named, not decoded).
    max_result_mb: float = 16.0
    max_images: int = 8

    @classmethod
    def from_env(cls) -> McpSettings:
        explicit = os.environ.get("DEMO_MCP_CONFIG", "").strip()
        default = Path("mcp.json")
        settings = cls(
            config_path=str(Path(explicit).expanduser()) if explicit
            else str(default.resolve()) if default.is_file() else "",
            call_timeout_s=_float("DEMO_MCP_CALL_TIMEOUT_S", cls.call_timeout_s),
            connect_timeout_s=_float("DEMO_MCP_CONNECT_TIMEOUT_S", cls.connect_timeout_s),
            server_api_key=os.environ.get("DEMO_MCP_API_KEY", "").strip(),
            server_allow_origins=tuple(os.environ.get("DEMO_MCP_ALLOW_ORIGINS", "").replace(",", " ").split()),
            public_url=os.environ.get("DEMO_PUBLIC_URL", "").strip() or cls.public_url,
            sign_in_timeout_s=_float("DEMO_MCP_SIGN_IN_TIMEOUT_S", cls.sign_in_timeout_s),
            secret_key=os.environ.get("DEMO_SECRET_KEY", "").strip(),
            max_result_mb=_float("DEMO_MCP_MAX_RESULT_MB", cls.max_result_mb),
            max_images=_int("DEMO_MCP_MAX_IMAGES", cls.max_images),
        )
        if settings.call_timeout_s <= 0 or settings.connect_timeout_s <= 0 or settings.sign_in_timeout_s <= 0 \
                or settings.max_result_mb <= 0:
            raise ValueError("DEMO_MCP_CALL_TIMEOUT_S, DEMO_MCP_CONNECT_TIMEOUT_S, DEMO_MCP_SIGN_IN_TIMEOUT_S and "
                             "DEMO_MCP_MAX_RESULT_MB must be positive")
        return settings


@dataclass(frozen=True)
class SandboxLimits:
    """Limits and isolation of each session's Python kernel (app/tools/sandbox/isolation.py builds the sandbox
    from them)."""

    memory_mb: int = 2048  # address space of each process
    total_memory_mb: int = 4096  # all processes of the sandbox and its files together (where a cgroup can be made)
    cpu_s: int = 600  # CPU seconds of each process
    file_mb: int = 200  # largest file written
    disk_mb: int = 512  # everything the kernel writes (its folder is a filesystem of this size)
    processes: int = 256  # processes and threads inside the sandbox (a kernel alone runs about a dozen threads)
    output_chars: int = 50_000  # text of one cell (prints, results, errors, every MIME type); the rest is cut
    max_images: int = 8  # pictures one cell may show
    image_mb: float = 8.0  # their bytes together
    cpus: float = 1.0  # CPU time of the whole sandbox, in cores (where a cgroup can be made)
    max_live: int = 4  # sandboxes running at once in one app process
    cell_timeout_s: float = 30.0  # a cell running longer is interrupted
    idle_shutdown_s: float = 1800.0  # an idle kernel is shut down
    isolation: str = "bubblewrap"  # "bubblewrap" (required on Linux) or "none" (resource limits only)
    network: bool = False  # off: the sandbox's network namespace has only its own loopback

    @classmethod
    def from_env(cls) -> SandboxLimits:
        # Every value is read as a float so that "1e3" or "2048.0" work for the integer limits too.
        isolation = os.environ.get("DEMO_KERNEL_ISOLATION", "").strip().lower()
        if not isolation:
            isolation = "bubblewrap" if sys.platform.startswith("linux") else "none"
        if isolation not in ("bubblewrap", "none"):
            raise ValueError(f"DEMO_KERNEL_ISOLATION must be 'bubblewrap' or 'none', not {isolation!r}")
        return cls(
            memory_mb=int(_float("DEMO_KERNEL_MEMORY_MB", cls.memory_mb)),
            total_memory_mb=int(_float("DEMO_KERNEL_TOTAL_MEMORY_MB", cls.total_memory_mb)),
            cpu_s=int(_float("DEMO_KERNEL_CPU_S", cls.cpu_s)),
            file_mb=int(_float("DEMO_KERNEL_FILE_MB", cls.file_mb)),
            disk_mb=int(_float("DEMO_KERNEL_DISK_MB", cls.disk_mb)),
            processes=int(_float("DEMO_KERNEL_PROCESSES", cls.processes)),
            output_chars=int(_float("DEMO_KERNEL_OUTPUT_CHARS", cls.output_chars)),
            max_images=int(_float("DEMO_KERNEL_MAX_IMAGES", cls.max_images)),
            image_mb=_float("DEMO_KERNEL_IMAGE_MB", cls.image_mb),
            cpus=_float("DEMO_KERNEL_CPUS", cls.cpus),
            max_live=int(_float("DEMO_KERNEL_MAX_LIVE", cls.max_live)),
            cell_timeout_s=_float("DEMO_KERNEL_CELL_TIMEOUT_S", cls.cell_timeout_s),
            idle_shutdown_s=_float("DEMO_KERNEL_IDLE_S", cls.idle_shutdown_s),
            isolation=isolation,
            network=_flag("DEMO_KERNEL_NETWORK"),
        )


@dataclass(frozen=True)
class SchemaLimits:
    """The largest JSON Schema (a tool's parameters, a response format) a grammar is built from, and how long
    compiling that grammar may take. Compile time grows steeply with enum values, alternatives and regex length
    (measured with SmolLM2's vocabulary: 10,000 enum values 3.7 s, 100,000 over 7 minutes), so sizes are refused
    before any work; the limits are OpenAI's own for structured outputs or looser."""

    max_bytes: int = 100_000  # the schema as JSON text
    max_nodes: int = 2_000  # JSON values in it: objects, arrays, strings, numbers...
    max_depth: int = 128  # objects and arrays nested
    max_enum: int = 1_000  # enum and const values in the whole schema
    max_pattern: int = 300  # characters of one regex (pattern, patternProperties)
    compile_timeout_s: float = 10.0  # a grammar not compiled by then is refused (transformers backend)
    # CPU seconds for the regexes of one validation against a schema from outside, together
    # (app/limits/schema_validation.py): a value not checked by then is refused. Python's `re` took 0.9 s for `^(a+)+$`
    # against 25 characters, doubling with each.
    regex_timeout_s: float = 0.5

    @classmethod
    def from_env(cls) -> SchemaLimits:
        return cls(
            max_bytes=_int("DEMO_SCHEMA_MAX_BYTES", cls.max_bytes),
            max_nodes=_int("DEMO_SCHEMA_MAX_NODES", cls.max_nodes),
            max_depth=_int("DEMO_SCHEMA_MAX_DEPTH", cls.max_depth),
            max_enum=_int("DEMO_SCHEMA_MAX_ENUM", cls.max_enum),
            max_pattern=_int("DEMO_SCHEMA_MAX_PATTERN", cls.max_pattern),
            compile_timeout_s=_float("DEMO_GRAMMAR_COMPILE_TIMEOUT_S", cls.compile_timeout_s),
            regex_timeout_s=_float("DEMO_SCHEMA_REGEX_TIMEOUT_S", cls.regex_timeout_s),
        )


@dataclass(frozen=True)
class HTTPTimeouts:
    """How long the API and MCP servers wait for a client (app/limits/http_timeouts.py): a connection that stays idle,
    or a request whose headers or body never complete (a half-open or trickling client), is closed after these."""

    keep_alive_s: float = 5.0  # idle between requests on a kept-alive connection
    headers_s: float = 10.0  # from connecting (or the first byte of the next request) to the end of its headers
    body_s: float = 120.0  # from the end of the headers to the end of the body (up to ~70 MB with images)

    @classmethod
    def from_env(cls) -> HTTPTimeouts:
        return cls(
            keep_alive_s=_float("DEMO_HTTP_KEEP_ALIVE_S", cls.keep_alive_s),
            headers_s=_float("DEMO_HTTP_HEADERS_TIMEOUT_S", cls.headers_s),
            body_s=_float("DEMO_HTTP_BODY_TIMEOUT_S", cls.body_s),
        )


@dataclass(frozen=True)
class RequestLimits:
    """The most messages (or Responses input items, or completion prompts), and characters of text in them, that
    one API request may have. Over either it is refused (413) before any model work: fitting a prompt to the
    context costs time per message. `prompts_at_once` is the share of the engine one request takes: a completion
    with many prompts runs at most that many at a time, so another client's request starts beside it instead of
    behind all of them."""

    max_messages: int = 2000
    max_chars: int = 1_000_000  # characters of text in all messages together
    prompts_at_once: int = 4  # DEMO_SERVER_PROMPTS_AT_ONCE

    def __post_init__(self) -> None:
        if self.prompts_at_once < 1:
            raise ValueError(f"DEMO_SERVER_PROMPTS_AT_ONCE must be at least 1, not {self.prompts_at_once!r}")

    @classmethod
    def from_env(cls) -> RequestLimits:
        return cls(
            max_messages=_int("DEMO_SERVER_MAX_MESSAGES", cls.max_messages),
            max_chars=_int("DEMO_SERVER_MAX_CHARS", cls.max_chars),
            prompts_at_once=_int("DEMO_SERVER_PROMPTS_AT_ONCE", cls.prompts_at_once),
        )


@dataclass(frozen=True)
class ServerSettings:
    """Everything the API server (app/frontends/api/) is built from: the model it serves, under which name, to whom, and
    its limits. `from_env` gives the defaults its command line starts from."""

    model: ModelSettings = ModelSettings()  # loaded at start-up, unless the app is handed a loaded client
    served_name: str | None = None  # the model id clients use; None: the backend's own model id
    host: str = "127.0.0.1"  # loopback only unless asked: the API has no key by default
    port: int = 8000
    api_key: str | None = None  # required as a Bearer token on /v1/ when set
    cors_origins: tuple[str, ...] = ()  # browser origins allowed to call the API; none by default
    default_max_tokens: int = 1024  # a request's token budget when it gives none
    limits: RequestLimits = RequestLimits()
    # Generations running at once, whichever requests they serve (each reads its engine on a thread): more wait
    # for a free one, in arrival order, without a thread.
    max_generations: int = 64  # DEMO_SERVER_MAX_GENERATIONS
    # On SIGTERM, requests still running after this are cancelled (their generations stop) and the process exits.
    shutdown_timeout_s: float = 2.0

    @classmethod
    def from_env(cls, choose_backend: Callable[[str], str]) -> ServerSettings:
        return cls(
            model=ModelSettings.from_env(choose_backend),
            host=os.environ.get("HOST", cls.host),
            api_key=os.environ.get("DEMO_SERVER_API_KEY") or None,
            cors_origins=comma_list(os.environ.get("DEMO_SERVER_CORS_ORIGINS", "")),
            limits=RequestLimits.from_env(),
            max_generations=max(1, _int("DEMO_SERVER_MAX_GENERATIONS", cls.max_generations)),
            shutdown_timeout_s=_float("DEMO_SERVER_SHUTDOWN_TIMEOUT_S", cls.shutdown_timeout_s),
        )


# A demo on one's own machine: one user, every conversation and document theirs (the Streamlit app without
# authentication, the MCP server).
LOCAL_OWNER = "local"


def downloads_allowed() -> bool:
    """Whether the user opted in to fetching models from a hub: DEMO_ALLOW_DOWNLOADS=1 (or true, yes, on)."""
    return _flag("DEMO_ALLOW_DOWNLOADS")


def offline_by_default() -> None:
    """Never reach a model hub unless the user explicitly opted in with DEMO_ALLOW_DOWNLOADS=1 (or true, yes, on)."""
    if not downloads_allowed():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
