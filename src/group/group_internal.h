/* SPDX-License-Identifier: MIT */
/* What the group layer tells the layers above it (metrics/). */
#ifndef TDL_GROUP_INTERNAL_H
#define TDL_GROUP_INTERNAL_H

#include "loop/loop_internal.h"

/* On loop's thread: the counts of the acceptor slots served there
 * (tdl_acceptor_stats' accepted and open, summed). */
void tdl__acceptor_loop_counts(tdl_loop *loop, uint64_t *accepted, uint64_t *open);

#endif /* TDL_GROUP_INTERNAL_H */
