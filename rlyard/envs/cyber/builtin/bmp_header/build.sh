#!/bin/sh
# Build ./target from src/ with the compiler and flags the grader passes in.
set -e
${CC:-gcc} ${CFLAGS:-} -o target src/*.c
