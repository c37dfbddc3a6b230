#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# infer-gserver-graph, G as a self-launching CUDA graph, through every G
# check of t/infer.t (pictures of every size checked pixel by pixel
# against the reference within infer.h's tolerance, curl, refusals,
# 408s, pipelining, slow and killed clients, a clean stop), and a 1024x1024 picture
# alone in its turn. CUDA graphs exist on the cuda backend only.
: "${GSOCK_BUILD:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${GSOCK_SRC:=$GSOCK_BUILD}"
G=$GSOCK_BUILD/apps/infer/infer-gserver-graph
if [ "${GSOCK_TEST_BACKEND:-host}" != cuda ]; then
	echo "1..0 # SKIP infer-gserver-graph is CUDA graphs: the cuda backend only (GSOCK_TEST_BACKEND=cuda on a GPU host)"
	exit 0
fi
if [ ! -x "$G" ]; then
	echo "1..0 # SKIP infer-gserver-graph is not built (configure found no CUDA toolkit with cuBLAS)"
	exit 0
fi
INFER_GSERVER=$G exec sh "$GSOCK_SRC/t/infer.t"
