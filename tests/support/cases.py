"""The case loop of the Python process tests (tests/grpc, tests/resp)."""
import shutil
import signal
import subprocess
import traceback


def run(cases):
    """Runs every case (a function without arguments that raises on failure),
    printing PASS or FAIL and the traceback; a failing case does not stop the
    others. Returns (passed, failed)."""
    passed, failed = 0, 0
    for case in cases:
        try:
            case()
            print(f"PASS {case.__name__}")
            passed += 1
        except Exception:  # one failing case does not stop the others
            print(f"FAIL {case.__name__}")
            traceback.print_exc()
            failed += 1
    return passed, failed


class Process:
    """A tallyd a test started: subclasses set self.process (a Popen), and
    self.log_path with self.log, the file its output goes to."""

    def log_text(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def finish(node, root, passed, failed):
    """Stops the node (None: never started), showing the end of its log when a
    case failed; removes root; prints the tally. The exit status."""
    if node is not None:
        if failed:
            print(node.log_text()[-4000:])
        node.stop()
    shutil.rmtree(root, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1
