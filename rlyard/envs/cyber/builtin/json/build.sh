#!/bin/sh
set -e
$CC $CFLAGS -o target src/*.c
