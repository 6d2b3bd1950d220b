"""The pyllamakv command through click's CliRunner, and one real subprocess."""
import os
import subprocess
import sys

from click.testing import CliRunner



def run(*args):
    from pyllamakv.commands.cli import main
    return CliRunner().invoke(main, list(args))


def test_generate_streams_text_and_rates(path):
    r = run("generate", "The capital of France is", "-n", "4", "--temp", "0", "--ctx", "64")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(" Paris")
    assert "prefill:" in r.stderr and "decode:" in r.stderr


def test_info_prints_sizes_and_plan(path):
    r = run("info", path, "--ctx", "3000", "--mem-gib", "1", "--kv-pool-mib", "8")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "architecture:  llama" in out and "layers:        30" in out
    assert "f16          23040 B" in out and "q8_0" in out
    assert "resident fraction" in out and "decode bound at 55 GB/s" in out


def test_bench_table(path):
    r = run("bench", "-p", "8", "-n", "2", "-r", "1", "--ctx", "32")
    assert r.exit_code == 0, r.output
    assert "pp8" in r.stdout and "tg2" in r.stdout


def test_chat_reads_lines_until_exit(path):
    from pyllamakv.commands.cli import main
    r = CliRunner().invoke(main, ["chat", "--ctx", "256", "-n", "3", "--temp", "0"],
                           input="Hi\n/exit\n")
    assert r.exit_code == 0, r.output
    assert r.stdout.strip()


def test_errors_are_one_line(path):
    r = run("generate", "x", "-m", "/nonexistent.gguf")
    assert r.exit_code == 1 and "model file not found" in r.stderr
    assert "Traceback" not in r.output
    r = run("generate", "x", "--kv-pool-mib", "much")
    assert r.exit_code == 2
    r = run("generate", "x", "--ctx", "64", "--type-k", "q9_9")
    assert r.exit_code == 1 and "unknown element type" in r.stderr


def test_subprocess_console_entry(path):
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-m", "pyllamakv.commands.cli", "generate", "The capital of "
                        "France is", "-n", "2", "--temp", "0", "--ctx", "64"],
                       capture_output=True, text=True, env=env, timeout=300,
                       cwd=os.path.dirname(path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(" Paris")


def test_info_plans_the_auto_pool_and_rejects_bad_pools(path):
    r = run("info", path, "--ctx", "3000", "--kv-pool-mib", "auto")
    assert r.exit_code == 0, r.output
    assert "plan for 3000 tokens" in r.stdout and "resident fraction" in r.stdout
    bad = run("info", path, "--ctx", "3000", "--kv-pool-mib", "lots")
    assert bad.exit_code == 2 and "neither a number of MiB nor 'auto'" in bad.output
    negative = run("info", path, "--ctx", "3000", "--kv-pool-mib", "-4")
    assert negative.exit_code == 2 and "--kv-pool-mib" in negative.output
    assert "kv_pool_mib must be a number in [0.0" in negative.output
    small = run("info", path, "--ctx", "3000", "--kv-pool-mib", "0.1")
    assert small.exit_code != 0 and "minimum" in small.output


def test_every_option_has_help():
    import click
    from pyllamakv.commands.cli import main
    missing = [(name, p.opts) for name, cmd in main.commands.items() for p in cmd.params
               if isinstance(p, click.Option) and not p.help]
    assert not missing


def test_info_takes_dash_m(path):
    r = run("info", "-m", path)
    assert r.exit_code == 0, r.output
    assert "architecture:  llama" in r.stdout


def test_generate_says_when_cut_at_n(path):
    r = run("generate", "Once upon a time", "-n", "3", "--temp", "0", "--ctx", "64")
    assert r.exit_code == 0 and "[cut at -n 3 tokens]" in r.stderr


def test_chat_ctrl_c_stops_the_reply_not_the_session():
    from pyllamakv.commands.chat_repl import run_chat

    class FakeLlama:
        n_tokens = 0

        def create_chat_completion(self, messages, **kw):
            def gen():
                yield {"choices": [{"delta": {"role": "assistant"}, "finish_reason": None}]}
                yield {"choices": [{"delta": {"content": "part"}, "finish_reason": None}]}
                if len(messages) == 1:
                    raise KeyboardInterrupt
                yield {"choices": [{"delta": {"content": " done"}, "finish_reason": "length"}]}
            return gen()

    messages = []
    run_chat(FakeLlama(), messages, 5, 0.0, 1, lambda llm: "rates", iter(["one", None, "two"]))
    assert [m["content"] for m in messages] == ["one", "part", "two", "part done"]
