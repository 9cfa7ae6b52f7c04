"""The case loop of the Python process tests (tests/grpc, tests/resp)."""
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
