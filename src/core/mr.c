/* Registered memory regions. */
#include <stdlib.h>

#include "core/core.h"

struct wimm_mr {
	struct wimm_ctx *ctx;
	struct wimm_bmr b;
	int exposed; /* live connections using it as their window */
};

int wimm_mr_reg(struct wimm_ctx *ctx, void *addr, size_t len, unsigned access, struct wimm_mr **out)
{
	struct wimm_mr *mr;
	int ret;

	if (!out)
		return WIMM_E_INVAL;
	*out = NULL;
	if (!ctx || !addr || len == 0 || (access & ~WIMM_REMOTE_ALL))
		return WIMM_E_INVAL;
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return WIMM_E_NOMEM;
	mr->ctx = ctx;
	ret = wimm_ctx_ops(ctx)->mr_reg(wimm_ctx_bctx(ctx), addr, len, access, &mr->b);
	if (ret) {
		free(mr);
		return ret;
	}
	wimm_ctx_count_object(ctx, 1);
	*out = mr;
	return 0;
}

int wimm_mr_dereg(struct wimm_mr **pmr)
{
	if (!pmr || !*pmr)
		return 0;
	struct wimm_mr *mr = *pmr;
	if (mr->exposed > 0)
		return WIMM_E_BUSY;
	wimm_ctx_ops(mr->ctx)->mr_dereg(wimm_ctx_bctx(mr->ctx), &mr->b);
	wimm_ctx_count_object(mr->ctx, -1);
	free(mr);
	*pmr = NULL;
	return 0;
}

void *wimm_mr_addr(const struct wimm_mr *mr)
{
	return mr ? mr->b.addr : NULL;
}

size_t wimm_mr_len(const struct wimm_mr *mr)
{
	return mr ? mr->b.len : 0;
}

const struct wimm_bmr *wimm_mr_bmr(const struct wimm_mr *mr)
{
	return &mr->b;
}

struct wimm_ctx *wimm_mr_ctx(const struct wimm_mr *mr)
{
	return mr->ctx;
}

void wimm_mr_expose(struct wimm_mr *mr, int delta)
{
	mr->exposed += delta;
}
