/* The segment store of the log service: segment files in one directory,
 * recovery, group commit and reads by position.
 *
 * A segment file "<16 hex digits>.wlog" is a 64-byte header (magic
 * "WIMMLOG\0", version, segment number, first position, a CRC32C of the
 * header) followed by records: a 40-byte header (magic, length, writer,
 * seq, position, the payload's CRC32C, the header's CRC32C) and the
 * payload. Recovery keeps every whole record and cuts a torn tail of the
 * last segment; anything else that does not check out is refused before
 * anything in the directory is changed. Truncation deletes whole segments
 * from the oldest on; the metadata file (log_meta.c) keeps what they held
 * that the log still needs: each writer's last sequence, and fences.
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
	size_t first_seg; /* segments before it are deleted */
	uint64_t first;	  /* the first position kept */
	/* Per position from base on: segment index << 40 | file offset of its
	 * record. */
	uint64_t base;
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
	size_t i = (size_t)(st->entries - st->base);
	if (grow((void **)&st->index, &st->index_cap, i + 1, sizeof(*st->index)))
		return WIMM_E_NOMEM;
	st->index[i] = (uint64_t)seg << 40 | off;
	return 0;
}

/* Writer w's next sequence is at position pos. */
static int writer_pos_push(struct log_writer_state *w, uint64_t pos)
{
	size_t i = (size_t)(w->last_seq - w->trunc_seq);
	if (grow((void **)&w->pos, &w->pos_cap, i + 1, sizeof(*w->pos)))
		return WIMM_E_NOMEM;
	w->pos[i] = pos;
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
		    !strcmp(e->d_name, LOCK_NAME) || log_meta_is_name(e->d_name))
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
		if (writer_pos_push(w, st->entries) || index_push(st, si, off))
			return WIMM_E_NOMEM;
		w->last_seq = w->durable_seq = r.seq;
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

/* The first position segment i holds, from its header (0 when it cannot be
 * read: its scan says why). */
static uint64_t seg_first_pos(struct log_store *st, size_t i)
{
	char name[64];
	unsigned char h[SEG_HDR];
	uint64_t first = 0;
	seg_name(name, sizeof(name), st->segs[i].no);
	int fd = openat(st->dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd >= 0 && full_pread(fd, h, SEG_HDR, 0) == 0)
		first = log_get64(h + 24);
	if (fd >= 0)
		close(fd);
	return first;
}

/* What the metadata keeps: fences, and the writers' truncated sequences. */
static int load_meta(struct log_store *st, uint64_t *first)
{
	struct log_meta m;
	int rc = log_meta_load(st->dirfd, st->dir, &m, st->log, st->log_arg);
	for (size_t i = 0; !rc && i < m.n; i++) {
		long wi = log_store_writer_find(st, m.writers[i].id, 1);
		if (wi < 0) {
			rc = WIMM_E_NOMEM;
			break;
		}
		struct log_writer_state *w = &st->writers[wi];
		w->trunc_seq = w->last_seq = w->durable_seq = m.writers[i].trunc_seq;
		w->epoch = m.writers[i].epoch;
	}
	*first = m.first;
	free(m.writers);
	return rc;
}

static int recover(struct log_store *st)
{
	uint64_t end = 0, meta_first = 0;
	int rc = list_segments(st);
	if (!rc)
		rc = load_meta(st, &meta_first);
	if (rc)
		return rc;
	/* A truncation interrupted between its metadata and its deletes: the
	 * segments wholly before the first position kept go now. */
	size_t doomed = 0;
	while (meta_first && doomed + 1 < st->nsegs && seg_first_pos(st, doomed + 1) <= meta_first)
		doomed++;
	st->first_seg = doomed;
	if (doomed < st->nsegs)
		st->entries = st->base = st->first = seg_first_pos(st, doomed);
	for (size_t i = doomed; !rc && i < st->nsegs; i++) {
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
	for (size_t i = 0; i < doomed; i++) {
		char name[64];
		seg_name(name, sizeof(name), st->segs[i].no);
		if (unlinkat(st->dirfd, name, 0) && errno != ENOENT) {
			say(st, WIMM_LOG_ERROR, "cannot delete truncated segment %s/%s: %s",
			    st->dir, name, strerror(errno));
			return WIMM_E_PERM;
		}
	}
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
		for (size_t i = st->first_seg; i < st->nsegs; i++)
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
	st->recovered -= st->first;
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
	for (size_t i = 0; i < st->nwriters; i++)
		free(st->writers[i].pos);
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

int log_store_append(struct log_store *st, size_t wi, uint64_t seq, const void *data, uint32_t len,
		     uint64_t *pos)
{
	struct log_writer_state *w = &st->writers[wi];
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
	if (!rc)
		rc = writer_pos_push(w, st->entries);
	if (rc)
		return rc;
	w->last_seq = seq;
	struct log_rec r = {.len = len,
			    .writer = w->id,
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

/* Copy the record at position p to buf + *got: 1, 0 when it does not fit
 * (WIMM_E_TOOBIG when nothing was copied yet, *n its size), PERM. */
static int copy_record(struct log_store *st, uint64_t p, unsigned char *buf, size_t cap,
		       size_t *got, uint32_t *n)
{
	uint64_t at = st->index[p - st->base];
	const struct seg *s = &st->segs[at >> 40];
	uint64_t off = at & ((1ull << 40) - 1);
	if (cap - *got < LOG_REC_HDR)
		return 0;
	if (full_pread(s->fd, buf + *got, LOG_REC_HDR, off))
		return WIMM_E_PERM;
	uint32_t len = log_get32(buf + *got + 4);
	if (LOG_REC_HDR + (size_t)len > cap - *got) {
		if (*n == 0) {
			*n = LOG_REC_HDR + len;
			return WIMM_E_TOOBIG;
		}
		return 0;
	}
	if (full_pread(s->fd, buf + *got + LOG_REC_HDR, len, off + LOG_REC_HDR))
		return WIMM_E_PERM;
	*got += LOG_REC_HDR + len;
	(*n)++;
	return 1;
}

long log_store_read(struct log_store *st, uint64_t from, uint32_t max, unsigned char *buf,
		    size_t cap, uint32_t *n)
{
	size_t got = 0;
	int rc = log_store_flush(st);
	*n = 0;
	if (rc)
		return rc;
	if (from < st->first)
		return WIMM_E_RANGE;
	for (uint64_t p = from; p < st->entries && (!max || *n < max); p++)
		if ((rc = copy_record(st, p, buf, cap, &got, n)) <= 0)
			break;
	return rc < 0 ? rc : (long)got;
}

long log_store_read_writer(struct log_store *st, size_t wi, uint64_t from_seq, uint32_t max,
			   unsigned char *buf, size_t cap, uint32_t *n)
{
	const struct log_writer_state *w = &st->writers[wi];
	size_t got = 0;
	int rc = log_store_flush(st);
	*n = 0;
	if (rc)
		return rc;
	if (from_seq <= w->trunc_seq)
		return WIMM_E_RANGE;
	for (uint64_t q = from_seq; q <= w->last_seq && (!max || *n < max); q++)
		if ((rc = copy_record(st, w->pos[q - w->trunc_seq - 1], buf, cap, &got, n)) <= 0)
			break;
	return rc < 0 ? rc : (long)got;
}

uint64_t log_store_first(const struct log_store *st)
{
	return st->first;
}

/* ------------------------------------------- fences and truncation */

/* The metadata as the writer table says, with the first position first. */
static int meta_save(struct log_store *st, uint64_t first)
{
	struct log_meta m = {.first = first};
	m.writers = calloc(st->nwriters ? st->nwriters : 1, sizeof(*m.writers));
	if (!m.writers)
		return WIMM_E_NOMEM;
	for (size_t i = 0; i < st->nwriters; i++) {
		const struct log_writer_state *w = &st->writers[i];
		if (w->epoch || w->trunc_seq)
			m.writers[m.n++] = (struct log_meta_writer){
			    .id = w->id, .trunc_seq = w->trunc_seq, .epoch = w->epoch};
	}
	int rc = log_meta_store(st->dirfd, st->dir, &m, st->log, st->log_arg);
	free(m.writers);
	return rc;
}

int log_store_fence(struct log_store *st, size_t wi, uint32_t epoch)
{
	struct log_writer_state *w = &st->writers[wi];
	uint32_t old = w->epoch;
	if (epoch <= old)
		return 0;
	w->epoch = epoch;
	int rc = meta_save(st, st->first);
	if (rc)
		w->epoch = old;
	return rc;
}

/* How many of writer w's kept sequences lie before position first. */
static size_t writer_before(const struct log_writer_state *w, uint64_t first)
{
	size_t lo = 0, hi = (size_t)(w->last_seq - w->trunc_seq);
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (w->pos[mid] < first)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int log_store_truncate(struct log_store *st, uint64_t before, uint64_t *first)
{
	size_t k = st->first_seg;
	int rc = log_store_flush(st);
	if (rc)
		return rc;
	while (k + 1 < st->nsegs && st->segs[k + 1].first_pos <= before)
		k++;
	*first = st->first;
	if (k == st->first_seg)
		return 0;
	uint64_t nfirst = st->segs[k].first_pos;
	/* The metadata first: a crash after it lets recovery finish the
	 * deletes; each writer keeps its sequence through it. */
	uint64_t *keep = calloc(st->nwriters ? st->nwriters : 1, sizeof(*keep));
	if (!keep)
		return WIMM_E_NOMEM;
	for (size_t i = 0; i < st->nwriters; i++) {
		keep[i] = st->writers[i].trunc_seq;
		st->writers[i].trunc_seq += writer_before(&st->writers[i], nfirst);
	}
	rc = meta_save(st, nfirst);
	for (size_t i = 0; i < st->nwriters; i++) {
		struct log_writer_state *w = &st->writers[i];
		size_t d = (size_t)(w->trunc_seq - keep[i]);
		if (rc)
			w->trunc_seq = keep[i];
		else if (d)
			memmove(w->pos, w->pos + d, (size_t)(w->last_seq - w->trunc_seq) * 8);
	}
	free(keep);
	if (rc)
		return rc;
	for (size_t i = st->first_seg; i < k; i++) {
		char name[64];
		seg_name(name, sizeof(name), st->segs[i].no);
		close(st->segs[i].fd);
		st->segs[i].fd = -1;
		if (unlinkat(st->dirfd, name, 0))
			say(st, WIMM_LOG_WARN, "cannot delete truncated segment %s/%s: %s", st->dir,
			    name, strerror(errno));
	}
	say(st, WIMM_LOG_INFO, "truncated %zu segments: positions before %llu are gone",
	    k - st->first_seg, (unsigned long long)nfirst);
	st->first_seg = k;
	*first = st->first = nfirst;
	return 0;
}

void log_store_stat(const struct log_store *st, struct wimm_log_stat *out)
{
	out->entries = st->entries;
	out->bytes = st->bytes;
	out->durable = st->durable;
	out->recovered = st->recovered;
	out->torn_bytes = st->torn_bytes;
	out->segments = st->nsegs - st->first_seg;
	out->first = st->first;
	out->fsyncs = st->fsyncs;
	out->writers_known = st->nwriters;
}
