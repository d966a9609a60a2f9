"""README.md's by-hand commands, run in order as a newcomer would, in a fresh run directory."""

import os
import re
import signal
import subprocess

from conftest import REPO

# One entry per foreground command of the block, in order: exit status, and text its output has.
EXPECTED = [
    (0, r"^step apiKeyIsComplete as apikey, applied$"),
    (0, r"^did navigate flow=WishlistFlow step=moviePicked\(withMovieId: 23452\) presentable=wishlist/movies$"),
    (4, r"step moviePicked\(withMovieId: 1\) as watched/movies, refused: not-visible: .*watched/movies is not visible"),
    (6, r"refused: unbound-stepper: no flow has bound stepper nobody"),
    (0, r"^deep link moviePicked\(withMovieId: 42\), applied$"),
    (0, r"^  wishlist/movie/42 -> WishlistFlow#1 @ wishlist/movie/42$"),
    (0, r"^# TYPE flowbus_\w+"),
    (0, r"^action increase sent to counter, acknowledged$"),
    (0, r"^step castPicked as wishlist/movie/42: applied$"),
    (4, r"^dropped: not-visible: .*wishlist/movies is not visible"),
    (0, r"^flowchart LR$"),
    (0, r"^nothing unreachable$"),
    (0, r"^all checks passed$"),
]


def by_hand_block():
    text = (REPO / "README.md").read_text()
    after = text[text.index("<!-- by-hand"):]
    body = after[after.index("```sh\n") + len("```sh\n"):]
    return [line for line in body[:body.index("```")].splitlines() if line.strip()]


def without_comment(line):
    return re.sub(r"\s+#\s.*$", "", line).strip()


def test_readme_by_hand_commands(bin_dir):
    signal.alarm(300)  # a dozen commands and two daemons: more than the usual per-test limit
    env = dict(os.environ, NO_COLOR="1")
    env.pop("FLOWBUS_CONFIG", None)
    env.pop("FLOWBUS_RUN_DIR", None)
    background, results = [], []
    try:
        for line in map(without_comment, by_hand_block()):
            if line.startswith("swift build"):
                continue  # built already: FLOWBUS_BIN_DIR
            line = line.replace("$(swift build --show-bin-path)", str(bin_dir))
            if line.startswith("export "):
                name, value = line[len("export "):].split("=", 1)
                env[name] = subprocess.run(["bash", "-c", f'printf %s {value}'], env=env, cwd=REPO,
                                           capture_output=True, text=True, check=True).stdout
                continue
            if line.endswith("&"):
                log = open(os.path.join(env["FLOWBUS_RUN_DIR"], f"bg{len(background)}.log"), "w")
                background.append((line, subprocess.Popen(["bash", "-c", "exec " + line[:-1]], env=env, cwd=REPO,
                                                          stdout=log, stderr=subprocess.STDOUT), log))
                continue
            done = subprocess.run(["bash", "-c", line], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
            results.append((line, done.returncode, done.stdout + done.stderr))
        assert len(results) == len(EXPECTED), [line for line, _, _ in results]
        for (line, status, output), (want_status, pattern) in zip(results, EXPECTED):
            assert status == want_status, f"{line}\nexited {status}, {want_status} expected:\n{output}"
            assert re.search(pattern, output, re.MULTILINE), f"{line}\n{pattern!r} not in:\n{output}"
        assert env["FLOWBUS_RUN_DIR"].startswith("/tmp/") and os.path.isdir(env["FLOWBUS_RUN_DIR"])
    finally:
        for _, process, _ in reversed(background):
            process.send_signal(signal.SIGTERM)
        for line, process, log in reversed(background):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()
    logs = {line: open(log.name).read() for line, _, log in background}
    watch = next(text for line, text in logs.items() if line.startswith("flowctl echo nav"))
    assert "did navigate flow=WatchedFlow step=moviePicked(withMovieId: 42)" in watch, watch
    state = next(text for line, text in logs.items() if line.startswith("flowctl echo state"))
    assert "snapshot reactor=counter" in state, state
    if "FLOWBUS_RUN_DIR" in env and env["FLOWBUS_RUN_DIR"].startswith("/tmp/"):
        subprocess.run(["rm", "-rf", env["FLOWBUS_RUN_DIR"]], check=False)
