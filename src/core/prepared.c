/* Prepared operations: a write-with-imm, write or send-with-imm checked
 * once and posted many times. The checks and the post are the
 * connection's (conn_ops.c); this module keeps the object: its checked
 * request, the backend's prebuilt one where the backend builds one, the
 * source region it holds, and its place in its connection's list, so that
 * a connection deleted first leaves it orphaned rather than dangling. */
#include <stdlib.h>

#include "core/core.h"

struct wimm_prep {
	struct wimm_conn *conn; /* NULL once the connection was freed */
	struct wimm_ctx *ctx;
	struct wimm_prep *next, **pprev; /* in the connection's list */
	struct wimm_mr *src;		 /* held: its dereg is BUSY meanwhile */
	void *bprep;			 /* the backend's request, or NULL */
	struct wimm_wr wr;		 /* the checked request */
};

static void unlink_prep(struct wimm_prep *p)
{
	if (!p->pprev)
		return;
	*p->pprev = p->next;
	if (p->next)
		p->next->pprev = p->pprev;
	p->next = NULL;
	p->pprev = NULL;
}

int wimm_prep_new(struct wimm_conn *c, enum wimm_op op, struct wimm_mr *src, size_t src_off,
		  size_t dst_off, size_t len, struct wimm_prep **out)
{
	struct wimm_wr wr;

	if (!out)
		return WIMM_E_INVAL;
	*out = NULL;
	int ret = wimm_conn_prep_check(c, op, src, src_off, dst_off, len, &wr);
	if (ret)
		return ret;
	struct wimm_prep *p = calloc(1, sizeof(*p));
	if (!p)
		return WIMM_E_NOMEM;
	p->wr = wr;
	p->conn = c;
	p->ctx = wimm_conn_ctx(c);
	const struct wimm_backend_ops *ops = wimm_ctx_ops(p->ctx);
	if (ops->prep_new) {
		ret = ops->prep_new(wimm_conn_bconn(c), &p->wr, &p->bprep);
		if (ret)
			goto err_free;
	}
	/* A zero-length operation reads no source: it holds none. */
	if (len > 0) {
		p->src = src;
		wimm_mr_expose(src, 1);
	}
	struct wimm_prep **head = wimm_conn_preps(c);
	p->next = *head;
	if (p->next)
		p->next->pprev = &p->next;
	p->pprev = head;
	*head = p;
	wimm_ctx_count_object(p->ctx, 1);
	*out = p;
	return 0;

err_free:
	free(p);
	return ret;
}

int wimm_prep_post(struct wimm_prep *p, uint32_t imm, unsigned flags)
{
	if (!p)
		return WIMM_E_INVAL;
	if (!p->conn)
		return (flags & ~WIMM_POST_FLAGS) ? WIMM_E_INVAL : WIMM_E_DISCONNECTED;
	return wimm_conn_prep_post(p->conn, p->bprep, &p->wr, imm, flags);
}

static void drop_bprep(struct wimm_prep *p)
{
	if (p->bprep)
		wimm_ctx_ops(p->ctx)->prep_delete(p->bprep);
	p->bprep = NULL;
}

int wimm_prep_delete(struct wimm_prep **pp)
{
	if (!pp || !*pp)
		return 0;
	struct wimm_prep *p = *pp;
	unlink_prep(p);
	drop_bprep(p);
	if (p->src)
		wimm_mr_expose(p->src, -1);
	wimm_ctx_count_object(p->ctx, -1);
	free(p);
	*pp = NULL;
	return 0;
}

void wimm_prep_orphan_all(struct wimm_prep *head)
{
	while (head) {
		struct wimm_prep *p = head;
		head = p->next;
		unlink_prep(p);
		drop_bprep(p);
		p->conn = NULL;
	}
}
