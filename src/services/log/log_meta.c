/* The log's metadata file, "wimm-log.meta" in the segment directory: what
 * the segments alone cannot say. For every writer id that was fenced or
 * lost entries to truncation: its fencing epoch and the last sequence
 * truncated away; and the first position the log keeps. Written whole to a
 * temporary file, fsynced and renamed over the old one (then the directory
 * fsynced), so a crash leaves the old file or the new one, never a mix.
 *
 * Layout: "WIMMMETA", version:4, count:4, first:8, then count records of
 * {id:8, trunc_seq:8, epoch:4, 0:4}, then a CRC32C of everything before. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log_internal.h"

#define META_MAGIC "WIMMMETA"
#define META_HEAD 24
#define META_REC 24
#define META_MAX_RECS (1u << 24)

int log_meta_is_name(const char *name)
{
	return !strcmp(name, LOG_META_NAME) || !strcmp(name, LOG_META_NAME ".tmp");
}

int log_meta_load(int dirfd, const char *dir, struct log_meta *out, wimm_log_fn log, void *arg)
{
	memset(out, 0, sizeof(*out));
	int fd = openat(dirfd, LOG_META_NAME, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		log_say(log, arg, WIMM_LOG_ERROR, "cannot open %s/%s: %s", dir, LOG_META_NAME,
			strerror(errno));
		return WIMM_E_PERM;
	}
	struct stat sb;
	unsigned char *buf = NULL;
	int rc = WIMM_E_PROTO;
	if (fstat(fd, &sb) || sb.st_size < META_HEAD + 4 || sb.st_size > (1 << 30))
		goto bad;
	size_t len = (size_t)sb.st_size;
	buf = malloc(len);
	if (!buf) {
		rc = WIMM_E_NOMEM;
		goto out;
	}
	if (pread(fd, buf, len, 0) != (ssize_t)len || memcmp(buf, META_MAGIC, 8) ||
	    log_get32(buf + 8) != LOG_VERSION ||
	    log_get32(buf + len - 4) != wimm_log_crc32c(0, buf, len - 4))
		goto bad;
	uint32_t n = log_get32(buf + 12);
	if (n > META_MAX_RECS || META_HEAD + (size_t)n * META_REC + 4 != len)
		goto bad;
	out->first = log_get64(buf + 16);
	out->writers = calloc(n ? n : 1, sizeof(*out->writers));
	if (!out->writers) {
		rc = WIMM_E_NOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		const unsigned char *r = buf + META_HEAD + (size_t)i * META_REC;
		out->writers[i] = (struct log_meta_writer){
		    .id = log_get64(r), .trunc_seq = log_get64(r + 8), .epoch = log_get32(r + 16)};
	}
	out->n = n;
	rc = 0;
	goto out;
bad:
	log_say(log, arg, WIMM_LOG_ERROR,
		"%s/%s is truncated or corrupt (not a wimm log metadata file)", dir, LOG_META_NAME);
out:
	free(buf);
	close(fd);
	return rc;
}

int log_meta_store(int dirfd, const char *dir, const struct log_meta *m, wimm_log_fn log, void *arg)
{
	size_t len = META_HEAD + m->n * META_REC + 4;
	unsigned char *buf = calloc(1, len);
	if (!buf)
		return WIMM_E_NOMEM;
	memcpy(buf, META_MAGIC, 8);
	log_put32(buf + 8, LOG_VERSION);
	log_put32(buf + 12, (uint32_t)m->n);
	log_put64(buf + 16, m->first);
	for (size_t i = 0; i < m->n; i++) {
		unsigned char *r = buf + META_HEAD + i * META_REC;
		log_put64(r, m->writers[i].id);
		log_put64(r + 8, m->writers[i].trunc_seq);
		log_put32(r + 16, m->writers[i].epoch);
	}
	log_put32(buf + len - 4, wimm_log_crc32c(0, buf, len - 4));
	int fd =
	    openat(dirfd, LOG_META_NAME ".tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int ok = fd >= 0 && write(fd, buf, len) == (ssize_t)len && fsync(fd) == 0;
	if (fd >= 0 && close(fd))
		ok = 0;
	ok = ok && renameat(dirfd, LOG_META_NAME ".tmp", dirfd, LOG_META_NAME) == 0 &&
	     fsync(dirfd) == 0;
	free(buf);
	if (!ok) {
		log_say(log, arg, WIMM_LOG_ERROR, "cannot write %s/%s: %s", dir, LOG_META_NAME,
			strerror(errno));
		return WIMM_E_PERM;
	}
	return 0;
}
