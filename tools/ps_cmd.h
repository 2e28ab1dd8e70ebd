/* `wimm ps`: the parameter server (include/wimm/ps.h) as processes. */
#ifndef WIMM_PS_CMD_H
#define WIMM_PS_CMD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <wimm/ps.h>

/* `wimm ps ...` (argv[0] is "ps"); returns the exit status. */
int ps_main(int argc, char **argv);

/* The test worker's gradient: element j of shard `shard` of worker `rank`
 * at iteration `iter`, a small integer (-64..63) so that sums of up to
 * 2^17 of them are exact in float32 whatever the order of addition; the
 * tests recompute every sum from it (ps_grad.c). */
float ps_test_grad(uint32_t rank, uint32_t shard, size_t j, uint32_t iter);

void ps_print_stats(FILE *f, const struct wimm_ps_stats *st);

#endif
