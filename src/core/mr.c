/* Registered memory regions, and memory wimm allocates for them: a sealed
 * memfd, so that a backend can hand a window in it to a peer process (the
 * ipc fabric maps it into peers of the same user). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/core.h"

struct wimm_mr {
	struct wimm_ctx *ctx;
	struct wimm_bmr b;
	int exposed;	/* live connections using it as their window */
	size_t map_len; /* > 0: wimm_mr_alloc's mapping of b.memfd, ours to free */
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
	mr->b.memfd = -1;
	wimm_ctx_count_object(ctx, 1);
	*out = mr;
	return 0;
}

int wimm_mr_alloc(struct wimm_ctx *ctx, size_t len, unsigned access, struct wimm_mr **out)
{
	long page = sysconf(_SC_PAGESIZE);
	int ret;

	if (!out)
		return WIMM_E_INVAL;
	*out = NULL;
	if (!ctx || len == 0 || (access & ~WIMM_REMOTE_ALL))
		return WIMM_E_INVAL;
	if (len > SIZE_MAX - (size_t)page || len > (size_t)INT64_MAX)
		return WIMM_E_NOMEM;
	size_t map_len = (len + (size_t)page - 1) & ~((size_t)page - 1);
	int fd = memfd_create("wimm-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0) {
		int err = errno;
		wimm_ctx_set_provider_error(ctx, err, "memfd_create (wimm_mr_alloc)");
		return err == ENOMEM || err == EMFILE || err == ENFILE ? WIMM_E_NOMEM
								       : WIMM_E_PROVIDER;
	}
	/* Sealed against resizing: a peer that maps it can never be made to
	 * fault (SIGBUS) by a shrink, nor can it grow what we hold. */
	if (ftruncate(fd, (off_t)map_len) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		int err = errno;
		wimm_ctx_set_provider_error(ctx, err, "sizing the memfd (wimm_mr_alloc)");
		ret = err == ENOSPC || err == EFBIG ? WIMM_E_NOMEM : WIMM_E_PROVIDER;
		goto err_close_fd;
	}
	void *addr = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (addr == MAP_FAILED) {
		wimm_ctx_set_provider_error(ctx, errno, "mmap (wimm_mr_alloc)");
		ret = WIMM_E_NOMEM;
		goto err_close_fd;
	}
	ret = wimm_mr_reg(ctx, addr, len, access, out);
	if (ret)
		goto err_unmap;
	(*out)->b.memfd = fd;
	(*out)->b.memfd_off = 0;
	(*out)->map_len = map_len;
	return 0;

err_unmap:
	munmap(addr, map_len);
err_close_fd:
	close(fd);
	return ret;
}

void wimm_mr_share_memfd(struct wimm_mr *mr, const struct wimm_mr *region, size_t off)
{
	if (region->b.memfd < 0)
		return;
	mr->b.memfd = region->b.memfd;
	mr->b.memfd_off = region->b.memfd_off + off;
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
	if (mr->map_len) {
		munmap(mr->b.addr, mr->map_len);
		close(mr->b.memfd);
	}
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
