#!/usr/bin/env python3
"""The residual_norm op's kernel test (tests/gpu/harness.py runs test_<op>.py
per op): the op launches h3_residual_rmsnorm_f32, which
tests/gpu/test_residual_rmsnorm.py compares with PyTorch bit for bit."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_residual_rmsnorm import main  # noqa: E402  (beside this script)

if __name__ == "__main__":
    sys.exit(main())
