/* The segment store of the log service: segment files in one directory,
 * recovery, group commit and reads by position.
 *
 * A segment file "<16 hex digits>.wlog" is a 64-byte header (magic
 * "WIMMLOG\0", version, segment number, first position, a CRC32C of the
 * header) followed by records: a 40-byte header (magic, length, writer,
 * seq, position, the payload's CRC32C, the header's CRC32C) and the
 * payload. Recovery keeps every whole record and cuts a torn tail of the
 * last segment; anything else that does not check out is refused before
 * anything in the directory is changed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log_internal.h"

#define SEG_HDR 64
#define SEG_MAGIC "WIMMLOG"
#define SEG_SUFFIX ".wlog"
#define LOCK_NAME "wimm-log.lock"
#define STAGE_CAP (8u << 20)

struct seg {
	uint64_t no, first_pos, size;
	int fd;
};

struct log_store {
	char *dir;
	int dirfd, lockfd;
	wimm_log_fn log;
	void *log_arg;
	uint64_t segment_bytes;
	struct seg *segs;
	size_t nsegs, segs_cap;
	/* Per position: segment index << 40 | file offset of its record. */
	uint64_t *index;
	size_t index_cap;
	uint64_t entries, bytes, durable, recovered, torn_bytes, fsyncs;
	unsigned char *stage; /* records not yet written to the last segment */
	size_t stage_len, stage_cap;
	struct log_writer_state *writers;
	size_t nwriters, writers_cap;
	unsigned char *scratch;
	size_t scratch_cap;
	/* An fdatasync in flight: how far it makes the log durable. */
	uint64_t sync_target;
	uint64_t *sync_snap; /* each writer's last_seq at its begin */
	size_t sync_n, sync_cap;
};

#define say(obj, lvl, ...) log_say((obj)->log, (obj)->log_arg, lvl, __VA_ARGS__)

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap : 16;
	while (n < need)
		n *= 2;
	void *q = realloc(*p, n * elem);
	if (!q)
		return WIMM_E_NOMEM;
	*p = q;
	*cap = n;
	return 0;
}

/* pread or pwrite all of len bytes at off (EINTR retried). */
static int full_pio(int fd, void *buf, size_t len, uint64_t off, int wr)
{
	size_t done = 0;
	while (done < len) {
		char *p = (char *)buf + done;
		off_t at = (off_t)(off + done);
		ssize_t r = wr ? pwrite(fd, p, len - done, at) : pread(fd, p, len - done, at);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		done += (size_t)r;
	}
	return 0;
}

static int full_pread(int fd, void *buf, size_t len, uint64_t off)
{
	return full_pio(fd, buf, len, off, 0);
}

long log_store_writer_find(struct log_store *st, uint64_t id, int create)
{
	for (size_t i = 0; i < st->nwriters; i++)
		if (st->writers[i].id == id)
			return (long)i;
	if (!create)
		return -1;
	if (grow((void **)&st->writers, &st->writers_cap, st->nwriters + 1, sizeof(*st->writers)))
		return WIMM_E_NOMEM;
	st->writers[st->nwriters] = (struct log_writer_state){.id = id, .live = -1};
	return (long)st->nwriters++;
}

struct log_writer_state *log_store_writer_at(struct log_store *st, size_t i)
{
	return i < st->nwriters ? &st->writers[i] : NULL;
}

size_t log_store_writers(const struct log_store *st)
{
	return st->nwriters;
}

static int index_push(struct log_store *st, size_t seg, uint64_t off)
{
	if (grow((void **)&st->index, &st->index_cap, st->entries + 1, sizeof(*st->index)))
		return WIMM_E_NOMEM;
	st->index[st->entries] = (uint64_t)seg << 40 | off;
	return 0;
}

static int scratch(struct log_store *st, size_t len)
{
	return grow((void **)&st->scratch, &st->scratch_cap, len, 1);
}

/* ------------------------------------------------------------- recovery */

static int is_segment_name(const char *n)
{
	size_t len = strlen(n);
	if (len != 16 + strlen(SEG_SUFFIX) || strcmp(n + 16, SEG_SUFFIX) != 0)
		return 0;
	for (int i = 0; i < 16; i++)
		if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f')))
			return 0;
	return 1;
}

static int cmp_seg(const void *a, const void *b)
{
	const struct seg *x = a, *y = b;
	return x->no < y->no ? -1 : x->no > y->no;
}

/* Every name in the directory: ours, or a refusal. */
static int list_segments(struct log_store *st)
{
	DIR *d = fdopendir(dup(st->dirfd));
	int rc = 0;
	if (!d) {
		say(st, WIMM_LOG_ERROR, "cannot read directory %s: %s", st->dir, strerror(errno));
		return WIMM_E_PERM;
	}
	/* The duplicate shares the offset of an earlier listing. */
	rewinddir(d);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		    !strcmp(e->d_name, LOCK_NAME))
			continue;
		if (!is_segment_name(e->d_name)) {
			say(st, WIMM_LOG_ERROR,
			    "directory %s holds a foreign file '%s' (not a wimm log segment): "
			    "give the server an empty directory or its own",
			    st->dir, e->d_name);
			rc = WIMM_E_PROTO;
			break;
		}
		rc = grow((void **)&st->segs, &st->segs_cap, st->nsegs + 1, sizeof(*st->segs));
		if (rc)
			break;
		st->segs[st->nsegs++] =
		    (struct seg){.no = strtoull(e->d_name, NULL, 16), .first_pos = 0, .fd = -1};
	}
	closedir(d);
	if (!rc && st->nsegs > 1)
		qsort(st->segs, st->nsegs, sizeof(*st->segs), cmp_seg);
	return rc;
}

static void seg_name(char *buf, size_t len, uint64_t no)
{
	snprintf(buf, len, "%016llx%s", (unsigned long long)no, SEG_SUFFIX);
}

/* Scan one segment; *end gets the offset past its last whole record. */
static int scan_segment(struct log_store *st, size_t si, uint64_t *end)
{
	struct seg *s = &st->segs[si];
	char name[64];
	unsigned char h[SEG_HDR];
	struct stat sb;
	seg_name(name, sizeof(name), s->no);
	s->fd = openat(st->dirfd, name, O_RDWR | O_CLOEXEC);
	if (s->fd < 0 || fstat(s->fd, &sb) < 0) {
		say(st, WIMM_LOG_ERROR, "cannot open segment %s/%s: %s", st->dir, name,
		    strerror(errno));
		return WIMM_E_PERM;
	}
	s->size = (uint64_t)sb.st_size;
	if (s->size < SEG_HDR) {
		say(st, WIMM_LOG_ERROR,
		    "segment %s/%s is truncated: %llu bytes, shorter than its %d-byte header",
		    st->dir, name, (unsigned long long)s->size, SEG_HDR);
		return WIMM_E_PROTO;
	}
	if (full_pread(s->fd, h, SEG_HDR, 0) || memcmp(h, SEG_MAGIC, 8) != 0 ||
	    log_get32(h + 8) != LOG_VERSION) {
		say(st, WIMM_LOG_ERROR, "%s/%s is not a wimm log segment (bad magic or version)",
		    st->dir, name);
		return WIMM_E_PROTO;
	}
	if (log_get32(h + 32) != wimm_log_crc32c(0, h, 32) || log_get64(h + 16) != s->no ||
	    log_get64(h + 24) != st->entries) {
		say(st, WIMM_LOG_ERROR,
		    "segment %s/%s: corrupt header or it does not follow the segment before "
		    "(first position %llu, expected %llu)",
		    st->dir, name, (unsigned long long)log_get64(h + 24),
		    (unsigned long long)st->entries);
		return WIMM_E_PROTO;
	}
	s->first_pos = st->entries;
	uint64_t off = SEG_HDR;
	unsigned char rh[LOG_REC_HDR];
	while (off + LOG_REC_HDR <= s->size) {
		struct log_rec r;
		if (full_pread(s->fd, rh, LOG_REC_HDR, off) || log_rec_decode(rh, &r) ||
		    r.pos != st->entries || off + LOG_REC_HDR + r.len > s->size)
			break;
		if (scratch(st, r.len ? r.len : 1))
			return WIMM_E_NOMEM;
		if (full_pread(s->fd, st->scratch, r.len, off + LOG_REC_HDR) ||
		    wimm_log_crc32c(0, st->scratch, r.len) != r.crc)
			break;
		long wi = log_store_writer_find(st, r.writer, 1);
		if (wi < 0)
			return WIMM_E_NOMEM;
		struct log_writer_state *w = &st->writers[wi];
		if (r.seq != w->last_seq + 1) {
			say(st, WIMM_LOG_ERROR,
			    "segment %s/%s: writer %llx jumps from seq %llu to %llu at position "
			    "%llu",
			    st->dir, name, (unsigned long long)r.writer,
			    (unsigned long long)w->last_seq, (unsigned long long)r.seq,
			    (unsigned long long)r.pos);
			return WIMM_E_PROTO;
		}
		w->last_seq = w->durable_seq = r.seq;
		if (index_push(st, si, off))
			return WIMM_E_NOMEM;
		st->entries++;
		st->bytes += r.len;
		off += LOG_REC_HDR + r.len;
	}
	*end = off;
	return 0;
}

static int new_segment(struct log_store *st)
{
	char name[64];
	unsigned char h[SEG_HDR] = {0};
	uint64_t no = st->nsegs ? st->segs[st->nsegs - 1].no + 1 : 0;
	int rc = grow((void **)&st->segs, &st->segs_cap, st->nsegs + 1, sizeof(*st->segs));
	if (rc)
		return rc;
	seg_name(name, sizeof(name), no);
	int fd = openat(st->dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	memcpy(h, SEG_MAGIC, 8);
	log_put32(h + 8, LOG_VERSION);
	log_put32(h + 12, SEG_HDR);
	log_put64(h + 16, no);
	log_put64(h + 24, st->entries);
	log_put32(h + 32, wimm_log_crc32c(0, h, 32));
	if (fd < 0 || full_pio(fd, h, SEG_HDR, 0, 1) || fsync(fd) || fsync(st->dirfd)) {
		say(st, WIMM_LOG_ERROR, "cannot create segment %s/%s: %s", st->dir, name,
		    strerror(errno));
		if (fd >= 0)
			close(fd);
		return WIMM_E_PERM;
	}
	st->segs[st->nsegs++] =
	    (struct seg){.no = no, .first_pos = st->entries, .size = SEG_HDR, .fd = fd};
	return 0;
}

static int recover(struct log_store *st)
{
	uint64_t end = 0;
	int rc = list_segments(st);
	for (size_t i = 0; !rc && i < st->nsegs; i++) {
		rc = scan_segment(st, i, &end);
		if (!rc && end != st->segs[i].size && i + 1 < st->nsegs) {
			say(st, WIMM_LOG_ERROR,
			    "segment %016llx%s in %s is truncated or corrupt at offset %llu of "
			    "%llu "
			    "while later segments follow: refusing to guess",
			    (unsigned long long)st->segs[i].no, SEG_SUFFIX, st->dir,
			    (unsigned long long)end, (unsigned long long)st->segs[i].size);
			rc = WIMM_E_PROTO;
		}
	}
	if (rc)
		return rc;
	/* Everything checked: only now change anything. */
	if (st->nsegs) {
		struct seg *last = &st->segs[st->nsegs - 1];
		if (end < last->size) {
			st->torn_bytes = last->size - end;
			if (ftruncate(last->fd, (off_t)end)) {
				say(st, WIMM_LOG_ERROR, "cannot cut the torn tail of %s: %s",
				    st->dir, strerror(errno));
				return WIMM_E_PERM;
			}
			say(st, WIMM_LOG_WARN, "recovery: cut a torn tail of %llu bytes",
			    (unsigned long long)st->torn_bytes);
			last->size = end;
		}
		/* What a killed server wrote may sit in the page cache only. */
		for (size_t i = 0; i < st->nsegs; i++)
			if (fsync(st->segs[i].fd)) {
				say(st, WIMM_LOG_ERROR, "cannot fsync %s: %s", st->dir,
				    strerror(errno));
				return WIMM_E_PERM;
			}
	} else {
		rc = new_segment(st);
		if (rc)
			return rc;
	}
	st->recovered = st->durable = st->entries;
	if (st->recovered)
		say(st, WIMM_LOG_INFO, "recovered %llu entries of %zu writers in %zu segments",
		    (unsigned long long)st->recovered, st->nwriters, st->nsegs);
	return 0;
}

int log_store_open(const char *dir, uint64_t segment_bytes, wimm_log_fn log, void *log_arg,
		   struct log_store **out)
{
	struct log_store *st = calloc(1, sizeof(*st));
	int rc = WIMM_E_NOMEM;
	if (!st)
		return rc;
	st->dirfd = st->lockfd = -1;
	st->log = log;
	st->log_arg = log_arg;
	st->segment_bytes = segment_bytes;
	st->dir = strdup(dir);
	st->stage_cap = STAGE_CAP;
	st->stage = malloc(st->stage_cap);
	if (!st->dir || !st->stage)
		goto fail;
	rc = WIMM_E_PERM;
	if (mkdir(dir, 0755) && errno != EEXIST) {
		say(st, WIMM_LOG_ERROR, "cannot create directory %s: %s", dir, strerror(errno));
		goto fail;
	}
	st->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (st->dirfd < 0) {
		say(st, WIMM_LOG_ERROR, "cannot open directory %s: %s", dir, strerror(errno));
		goto fail;
	}
	rc = list_segments(st);
	if (rc)
		goto fail;
	st->nsegs = 0;
	st->lockfd = openat(st->dirfd, LOCK_NAME, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (st->lockfd < 0) {
		say(st, WIMM_LOG_ERROR, "directory %s is not writable: %s", dir, strerror(errno));
		rc = WIMM_E_PERM;
		goto fail;
	}
	if (flock(st->lockfd, LOCK_EX | LOCK_NB)) {
		say(st, WIMM_LOG_ERROR, "directory %s is in use by another log server", dir);
		rc = WIMM_E_PERM;
		goto fail;
	}
	rc = recover(st);
	if (rc)
		goto fail;
	*out = st;
	return 0;
fail:
	log_store_close(&st);
	return rc;
}

void log_store_close(struct log_store **pst)
{
	struct log_store *st = pst ? *pst : NULL;
	if (!st)
		return;
	for (size_t i = 0; i < st->nsegs; i++)
		if (st->segs[i].fd >= 0)
			close(st->segs[i].fd);
	if (st->lockfd >= 0)
		close(st->lockfd);
	if (st->dirfd >= 0)
		close(st->dirfd);
	free(st->segs);
	free(st->index);
	free(st->stage);
	free(st->writers);
	free(st->scratch);
	free(st->sync_snap);
	free(st->dir);
	free(st);
	*pst = NULL;
}

/* --------------------------------------------------------------- append */

int log_store_flush(struct log_store *st)
{
	if (!st->stage_len)
		return 0;
	struct seg *s = &st->segs[st->nsegs - 1];
	if (full_pio(s->fd, st->stage, st->stage_len, s->size, 1)) {
		say(st, WIMM_LOG_ERROR, "cannot write segment %016llx%s in %s: %s",
		    (unsigned long long)s->no, SEG_SUFFIX, st->dir, strerror(errno));
		return WIMM_E_PERM;
	}
	s->size += st->stage_len;
	st->stage_len = 0;
	return 0;
}

int log_store_sync(struct log_store *st)
{
	int rc = log_store_flush(st);
	if (rc || st->durable == st->entries)
		return rc;
	if (fdatasync(st->segs[st->nsegs - 1].fd)) {
		say(st, WIMM_LOG_ERROR, "cannot fsync the segment file in %s: %s", st->dir,
		    strerror(errno));
		return WIMM_E_PERM;
	}
	st->durable = st->entries;
	st->fsyncs++;
	for (size_t i = 0; i < st->nwriters; i++)
		st->writers[i].durable_seq = st->writers[i].last_seq;
	return 0;
}

int log_store_sync_begin(struct log_store *st, int *fd)
{
	int rc = log_store_flush(st);
	*fd = -1;
	if (rc || st->durable == st->entries)
		return rc;
	if (grow((void **)&st->sync_snap, &st->sync_cap, st->nwriters, sizeof(*st->sync_snap)))
		return WIMM_E_NOMEM;
	for (size_t i = 0; i < st->nwriters; i++)
		st->sync_snap[i] = st->writers[i].last_seq;
	st->sync_n = st->nwriters;
	st->sync_target = st->entries;
	*fd = st->segs[st->nsegs - 1].fd;
	return 0;
}

void log_store_sync_end(struct log_store *st, int ok)
{
	if (!ok)
		return;
	st->fsyncs++;
	if (st->sync_target > st->durable)
		st->durable = st->sync_target;
	for (size_t i = 0; i < st->sync_n; i++)
		if (st->sync_snap[i] > st->writers[i].durable_seq)
			st->writers[i].durable_seq = st->sync_snap[i];
}

int log_store_dirty(const struct log_store *st)
{
	return st->durable != st->entries;
}

int log_store_append(struct log_store *st, uint64_t writer, uint64_t seq, const void *data,
		     uint32_t len, uint64_t *pos)
{
	size_t need = LOG_REC_HDR + (size_t)len;
	struct seg *s = &st->segs[st->nsegs - 1];
	int rc;
	if (s->size + st->stage_len + need > st->segment_bytes &&
	    s->size + st->stage_len > SEG_HDR) {
		/* Roll: the full segment is fsynced before the next begins. */
		rc = log_store_sync(st);
		if (!rc && fsync(s->fd))
			rc = WIMM_E_PERM;
		if (!rc)
			rc = new_segment(st);
		if (rc)
			return rc;
		s = &st->segs[st->nsegs - 1];
	}
	if (st->stage_len + need > st->stage_cap) {
		rc = log_store_flush(st);
		if (rc)
			return rc;
		if (need > st->stage_cap) {
			unsigned char *p = realloc(st->stage, need);
			if (!p)
				return WIMM_E_NOMEM;
			st->stage = p;
			st->stage_cap = need;
		}
	}
	rc = index_push(st, st->nsegs - 1, s->size + st->stage_len);
	if (rc)
		return rc;
	struct log_rec r = {.len = len,
			    .writer = writer,
			    .seq = seq,
			    .pos = st->entries,
			    .crc = wimm_log_crc32c(0, data, len)};
	log_rec_encode(st->stage + st->stage_len, &r);
	if (len)
		memcpy(st->stage + st->stage_len + LOG_REC_HDR, data, len);
	st->stage_len += need;
	*pos = st->entries++;
	st->bytes += len;
	return 0;
}

/* ----------------------------------------------------------------- read */

long log_store_read(struct log_store *st, uint64_t from, uint32_t max, unsigned char *buf,
		    size_t cap, uint32_t *n)
{
	size_t got = 0;
	int rc = log_store_flush(st);
	*n = 0;
	if (rc)
		return rc;
	for (uint64_t p = from; p < st->entries && (!max || *n < max); p++) {
		const struct seg *s = &st->segs[st->index[p] >> 40];
		uint64_t off = st->index[p] & ((1ull << 40) - 1);
		if (cap - got < LOG_REC_HDR)
			break;
		if (full_pread(s->fd, buf + got, LOG_REC_HDR, off))
			return WIMM_E_PERM;
		uint32_t len = log_get32(buf + got + 4);
		if (LOG_REC_HDR + (size_t)len > cap - got) {
			if (*n == 0) {
				*n = LOG_REC_HDR + len;
				return WIMM_E_TOOBIG;
			}
			break;
		}
		if (full_pread(s->fd, buf + got + LOG_REC_HDR, len, off + LOG_REC_HDR))
			return WIMM_E_PERM;
		got += LOG_REC_HDR + len;
		(*n)++;
	}
	return (long)got;
}

void log_store_stat(const struct log_store *st, struct wimm_log_stat *out)
{
	out->entries = st->entries;
	out->bytes = st->bytes;
	out->durable = st->durable;
	out->recovered = st->recovered;
	out->torn_bytes = st->torn_bytes;
	out->segments = st->nsegs;
	out->fsyncs = st->fsyncs;
	out->writers_known = st->nwriters;
}
