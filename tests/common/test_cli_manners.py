"""CLI manners: --version, one-line start-up failures, settings in --help, new-token, imports."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from headwater.cli import main
from headwater.enricher.driver.settings import EnricherSettings
from headwater.ingest.admission.auth import hash_token, parse_tokens
from headwater.ingest.commands.settings import CommandSettings
from headwater.ingest.settings import IngestSettings
from headwater.runtime.startup import settings_variables

ROOT = Path(__file__).resolve().parents[2]
HEADWATER = [sys.executable, "-m", "headwater.cli"]


def headwater(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed CLI in a child process, as an operator would; bounded in time."""
    return subprocess.run(
        [*HEADWATER, *argv], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without any HEADWATER_*/JAVA_HOME of the caller, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HEADWATER_", "OTEL_"))}
    env.pop("JAVA_HOME", None)
    return env | extra


def assert_one_clear_line(result: subprocess.CompletedProcess[str], prefix: str, *words: str):
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("{")]
    assert len(lines) == 1, result.stderr  # JSON log lines aside, one line
    assert lines[0].startswith(prefix), lines[0]
    for word in words:
        assert word in lines[0], lines[0]


def test_version_is_the_installed_distributions(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == (
        f"headwater {importlib.metadata.version('headwater')}"
    )


# -- start-up failures: one line, exit 2, no traceback ---------------------------------------


def ingest_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    return clean_env(
        HEADWATER_INGEST_LISTEN_ADDRESS="127.0.0.1:0",
        HEADWATER_INGEST_METRICS_PORT="0",
        **settings,
    )


@pytest.mark.parametrize(
    ("files", "settings", "words"),
    [
        ({}, {"HEADWATER_INGEST_TOKENS_FILE": "{tmp}/absent.yaml"}, ["absent.yaml: no such file"]),
        (
            {"t.yaml": "gateways:\n  - id: gw\n    tenant: [x\n"},
            {"HEADWATER_INGEST_TOKENS_FILE": "{tmp}/t.yaml"},
            ["t.yaml: not valid YAML", "line 3"],
        ),
        (
            {"t.yaml": "gateways:\n  - id: gw\n"},
            {"HEADWATER_INGEST_TOKENS_FILE": "{tmp}/t.yaml"},
            ["t.yaml: gateways[0]: 'id' and 'tenant' are required"],
        ),
        (
            {"key.pem": "-----BEGIN PRIVATE KEY-----\n"},
            {
                "HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "true",
                "HEADWATER_INGEST_TLS_CERT_FILE": "{tmp}/missing-cert.pem",
                "HEADWATER_INGEST_TLS_KEY_FILE": "{tmp}/key.pem",
            },
            ["HEADWATER_INGEST_TLS_CERT_FILE=", "missing-cert.pem: no such file"],
        ),
        (
            {"cert.pem": "not a certificate", "key.pem": "-----BEGIN PRIVATE KEY-----\n"},
            {
                "HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "true",
                "HEADWATER_INGEST_TLS_CERT_FILE": "{tmp}/cert.pem",
                "HEADWATER_INGEST_TLS_KEY_FILE": "{tmp}/key.pem",
            },
            ["cert.pem: not a PEM file"],
        ),
        (
            {},
            {"HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "true", "HEADWATER_INGEST_MAX_STREAMS": "x"},
            ["HEADWATER_INGEST_MAX_STREAMS='x' is not an integer"],
        ),
    ],
)
def test_ingest_serve_that_cannot_start_says_why_in_one_line(tmp_path, files, settings, words):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = ingest_env(tmp_path, **{k: v.format(tmp=tmp_path) for k, v in settings.items()})
    result = headwater("ingest", "serve", env=env)
    assert_one_clear_line(result, "headwater ingest serve: ", *words)


def java_less_env() -> dict[str, str]:
    """PATH with this Python's folder only: no java on it, no JAVA_HOME."""
    return clean_env(PATH=str(Path(sys.executable).parent))


def test_enricher_without_java_says_so_in_one_line(tmp_path):
    result = headwater(
        "enricher", "run", "--checkpoint-location", str(tmp_path / "cp"), env=java_less_env()
    )
    assert_one_clear_line(result, "headwater enricher run: ", "needs Java", "Java 17")


@pytest.mark.parametrize("command", [["run", "--no-enricher"], ["serve"]])
def test_devstack_without_java_says_so_in_one_line(tmp_path, command):
    result = headwater(
        "devstack", *command, "--workdir", str(tmp_path / "stack"), env=java_less_env()
    )
    assert_one_clear_line(result, "headwater devstack ", "needs Java")
    assert not (tmp_path / "stack").exists(), "it started before checking"


def test_enricher_bad_setting_is_one_line():
    result = headwater(
        "enricher", "run", env=clean_env(HEADWATER_ENRICHER_STARTING_OFFSETS="yesterday")
    )
    assert_one_clear_line(result, "headwater enricher run: ", "HEADWATER_ENRICHER_STARTING_OFFSETS")


# -- --help lists the variables each service reads -------------------------------------------


def help_variables(*command: str) -> dict[str, str]:
    out = headwater(*command, "--help", env=clean_env()).stdout
    _, _, table = out.partition("environment variables (default):\n")
    rows = (line.split(None, 1) for line in table.splitlines() if line.startswith("  "))
    return {name: rest.strip() for name, rest in rows}


def test_ingest_help_lists_every_variable_its_settings_read_with_defaults():
    listed = help_variables("ingest", "serve")
    # Every declared ingest and command variable is listed (none missed).
    declared = {d.variable for d in [*IngestSettings.declared(), *CommandSettings.declared()]}
    assert len(declared) >= 35, declared  # the declarations are seen
    assert declared <= set(listed)
    defaults = IngestSettings()
    assert listed["HEADWATER_INGEST_MAX_STREAMS"] == str(defaults.max_streams)
    assert listed["HEADWATER_INGEST_LISTEN_ADDRESS"] == defaults.listen_address
    assert listed["HEADWATER_INGEST_TOKENS_FILE"] == "(unset)"
    assert listed["HEADWATER_KAFKA_BOOTSTRAP_SERVERS"] == "127.0.0.1:9092"
    assert listed["HEADWATER_LOG_LEVEL"] == "INFO"


def test_enricher_help_lists_its_settings_and_kafkas():
    listed = help_variables("enricher", "run")
    assert set(settings_variables(EnricherSettings.from_env)) <= set(listed)
    defaults = EnricherSettings()
    assert listed["HEADWATER_ENRICHER_MAX_ATTEMPTS"] == str(defaults.max_attempts)
    assert listed["HEADWATER_ENRICHER_CHECKPOINT_LOCATION"] == defaults.checkpoint_location
    assert "HEADWATER_KAFKA_SECURITY_PROTOCOL" in listed


def test_settings_variables_follow_the_code_not_a_copy():
    def from_env(env):
        from headwater.runtime.env import env_int, env_str

        return env_str(env, "HEADWATER_X_A", "a"), env_int(env, "HEADWATER_X_B", 3)

    assert settings_variables(from_env) == {"HEADWATER_X_A": "a", "HEADWATER_X_B": "3"}


# -- new-token -------------------------------------------------------------------------------


def test_new_token_prints_a_token_and_its_tokens_file_entry():
    results = [
        headwater(
            "ingest", "new-token", "--gateway-id", "gw-9", "--tenant", "acme", "--device", "acme-*"
        )
        for _ in range(2)
    ]
    tokens = []
    for result in results:
        assert result.returncode == 0, result.stderr
        token, *entry = result.stdout.splitlines()
        assert len(token) >= 40 and token.isprintable() and " " not in token
        gateways = parse_tokens("gateways:\n" + "\n".join(entry) + "\n")
        assert gateways["gw-9"].token_sha256 == hash_token(token)
        assert hash_token(token) == hashlib.sha256(token.encode()).hexdigest()
        assert gateways["gw-9"].tenant == "acme"
        tokens.append(token)
    assert tokens[0] != tokens[1]


# -- imports: the base CLI and the libraries load no heavy dependency ------------------------

HEAVY = (
    "pyspark",
    "kubernetes",
    "confluent_kafka",
    "pandas",
    "pyarrow",
    "grpc",
    "aiokafka",
    "yaml",
)

PROBE = """
import sys, importlib
for name in sys.argv[2:]:
    mod = importlib.import_module(name)
    if name == "headwater.cli":
        mod.build_parser()
heavy = set(sys.argv[1].split(","))
print(",".join(sorted({m.split(".")[0] for m in sys.modules} & heavy)))
"""


@pytest.mark.parametrize(
    ("modules", "allowed"),
    [
        # The gateway group lives in headwater.gateway, whose package imports its gRPC client.
        (["headwater.cli"], {"grpc"}),
        (["headwater.gateway"], {"grpc"}),
        (["headwater.subscriber"], {"aiokafka"}),
        (["headwater.contracts", "headwater.master.records", "headwater.master.cli"], set()),
    ],
)
def test_imports_load_only_what_the_part_needs(modules, allowed):
    result = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(HEAVY), *modules],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded = set(filter(None, result.stdout.strip().split(",")))
    assert loaded <= allowed, f"{modules} imported {sorted(loaded - allowed)}"


BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"grpc", "aiokafka"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
from headwater.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_group_whose_extra_is_missing_is_listed_and_says_which_extra():
    def run(*argv):
        return subprocess.run(
            [sys.executable, "-c", BLOCKER, *argv], capture_output=True, text=True, timeout=60
        )

    listing = run("--help")
    assert listing.returncode == 0, listing.stderr
    assert re.search(
        r"gateway\s+\(not installed: pip install 'headwater\[gateway\]'\)", listing.stdout
    )
    result = run("gateway", "stats", "--spool", "x")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        "headwater gateway: needs the gateway extra (grpc is not installed): "
        "pip install 'headwater[gateway]'"
    )


# -- groups other distributions add (entry-point group headwater.commands) -------------------


def add_distribution(site: Path, name: str, module: str, source: str) -> None:
    """Put a distribution ``name`` on ``site`` whose module adds a group to ``headwater``."""
    info = site / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[headwater.commands]\n{name} = {module}:register\n")
    (site / f"{module}.py").write_text(source)


def test_a_group_another_distribution_adds_is_found_through_its_entry_point(tmp_path):
    add_distribution(
        tmp_path,
        "hello",
        "hello_cmds",
        "def register(subparsers):\n"
        "    cmd = subparsers.add_parser('hello', help='say hello')\n"
        "    cmd.set_defaults(func=lambda args: print('hello from an entry point'))\n",
    )
    # One whose module needs a library that is not installed: listed, says which extra.
    add_distribution(tmp_path, "needy", "needy_cmds", "import not_installed_lib\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    listing = headwater("--help", env=env)
    assert listing.returncode == 0, listing.stderr
    # headwater-dev's groups first, then the others, then the built-in ones.
    commands = re.findall(r"^    (\w+)", listing.stdout, re.MULTILINE)
    assert commands[:6] == ["devstack", "bench", "chaos", "hello", "needy", "ingest"], commands
    assert re.search(r"needy\s+\(not installed: pip install 'headwater\[dev\]'\)", listing.stdout)
    ran = headwater("hello", env=env)
    assert (ran.returncode, ran.stdout) == (0, "hello from an entry point\n"), ran.stderr
    needy = headwater("needy", env=env)
    assert needy.returncode == 2 and needy.stderr.strip() == (
        "headwater needy: needs the dev extra (not_installed_lib is not installed): "
        "pip install 'headwater[dev]'"
    )
