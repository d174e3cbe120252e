"""Every serving command spells and checks its listener flags the same way
(ssdlab.serving.add_listener_arguments) and hands them to the native server as the same
keyword arguments (ssdlab.serving.listener_options)."""

import pytest

from ssdlab.cli import build_parser
from ssdlab.serving import listener_options

# (command words before the flags, positional arguments after them)
SERVING = [
    (["serve"], ["dev.toml"]),
    (["nvme", "serve"], ["dev.toml"]),
    (["cache", "serve"], ["spec.toml"]),
    (["kv", "serve"], []),
    (["uio", "kv-serve"], []),
    (["spi", "serve"], []),
    (["rmml", "node"], []),
    (["rmml", "serve"], []),
]

FLAGS = ["--listen", "127.0.0.1:7000", "--allow-remote", "--idle-timeout", "2.5", "--evict-idle-after", "3", "-q"]


@pytest.mark.parametrize("words,rest", SERVING, ids=[" ".join(w) for w, _ in SERVING])
def test_every_serving_command_takes_the_same_listener_flags(words, rest):
    args = build_parser().parse_args(words + rest + FLAGS)
    o = listener_options(args)
    assert {k: o[k] for k in ("listen", "allow_remote", "idle_timeout_s", "evict_idle_after_s", "quiet")} == {
        "listen": "127.0.0.1:7000", "allow_remote": True, "idle_timeout_s": 2.5, "evict_idle_after_s": 3.0, "quiet": True}
    # The old spelling of --evict-idle-after is still accepted, by every command.
    old = build_parser().parse_args(words + rest + ["--idle-evict", "4"])
    assert listener_options(old)["evict_idle_after_s"] == 4.0


# serprog serves one client at a time: it has no --max-connections.
BAD = [(w, r, flag, value) for w, r in SERVING
       for flag, value in [("--idle-timeout", "-1"), ("--evict-idle-after", "x"), ("--max-connections", "0")]
       if not (flag == "--max-connections" and w == ["spi", "serve"])]


@pytest.mark.parametrize("words,rest,flag,value", BAD, ids=[f"{' '.join(w)} {f} {v}" for w, _, f, v in BAD])
def test_bad_listener_values_are_refused_by_the_parser(words, rest, flag, value, capsys):
    p = build_parser()
    with pytest.raises(SystemExit) as e:
        p.parse_args(words + rest + [flag, value])
    assert e.value.code == 2
    assert flag in capsys.readouterr().err


def test_tls_files_go_together():
    args = build_parser().parse_args(["serve", "--tls-cert", "c.pem", "dev.toml"])
    with pytest.raises(ValueError, match="--tls-cert and --tls-key go together"):
        listener_options(args)
    args = build_parser().parse_args(["serve", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--handshake-timeout", "4",
                                      "dev.toml"])
    o = listener_options(args)
    assert (o["tls_cert"], o["tls_key"], o["handshake_timeout_s"]) == ("c.pem", "k.pem", 4.0)
