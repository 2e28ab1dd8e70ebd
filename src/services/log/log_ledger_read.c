/* Reading a ledger from its ensemble by the quorum rule: the LAC is the
 * highest one the last entry of any reachable server carries (LACs only
 * grow along a ledger), entries up to it are committed, and any server
 * that holds one has it whole (CRC32C checked). */
#include <string.h>

#include "log_internal.h"

/* The LAC a stored ledger entry carries. */
static int entry_lac(const struct wimm_log_entry *e, uint64_t *lac, int *mark)
{
	if (e->len < LOG_LEDGER_HDR)
		return WIMM_E_PROTO;
	uint64_t h = log_get64(e->data);
	*lac = h & ~LOG_LEDGER_MARK;
	*mark = (h & LOG_LEDGER_MARK) != 0;
	return 0;
}

struct last {
	uint64_t lac;
	int rc;
};

static int take_last(void *arg, const struct wimm_log_entry *e)
{
	struct last *t = arg;
	int mark;
	t->rc = entry_lac(e, &t->lac, &mark);
	return 1;
}

struct deliver {
	uint64_t next, upto;
	wimm_log_entry_fn fn;
	void *arg;
	int rc, stop;
};

static int deliver(void *arg, const struct wimm_log_entry *e)
{
	struct deliver *d = arg;
	uint64_t lac;
	int mark;
	if (e->seq > d->upto)
		return 1;
	if ((d->rc = entry_lac(e, &lac, &mark)) != 0)
		return 1;
	d->next = e->seq + 1;
	if (mark)
		return 0;
	struct wimm_log_entry u = *e;
	u.data = (const unsigned char *)e->data + LOG_LEDGER_HDR;
	u.len = e->len - LOG_LEDGER_HDR;
	u.crc = wimm_log_crc32c(0, u.data, u.len);
	d->stop = d->fn(d->arg, &u) != 0;
	return d->stop;
}

int wimm_log_ledger_read(struct wimm_log_reader *const *readers, unsigned n, uint64_t id,
			 uint64_t from_seq, uint32_t max, wimm_log_entry_fn fn, void *arg,
			 int timeout_ms)
{
	if (!readers || !n || !id || !from_seq || !fn)
		return WIMM_E_INVAL;
	uint64_t lac = 0, last[16] = {0};
	int answered = 0, rc = WIMM_E_DISCONNECTED;
	if (n > 16)
		n = 16;
	for (unsigned i = 0; i < n; i++) {
		struct wimm_log_ledger_info info;
		struct last t = {0};
		if (!readers[i])
			continue;
		rc = wimm_log_reader_ledger(readers[i], id, &info, timeout_ms);
		if (!rc && info.last_seq >= info.first_seq && info.last_seq > 0) {
			int got = wimm_log_read_writer(readers[i], id, info.last_seq, 1, take_last,
						       &t, timeout_ms);
			rc = got < 0 ? got : t.rc;
		}
		if (rc)
			continue;
		answered = 1;
		last[i] = info.last_seq;
		if (t.lac > lac)
			lac = t.lac;
	}
	if (!answered)
		return rc;
	if (from_seq > lac)
		return 0;
	struct deliver d = {.next = from_seq, .upto = lac, .fn = fn, .arg = arg};
	if (max && from_seq + max - 1 < lac)
		d.upto = from_seq + max - 1;
	/* From the first server that holds the entries; the next on failure. */
	for (unsigned i = 0; i < n && d.next == from_seq; i++) {
		if (!readers[i] || last[i] < from_seq)
			continue;
		int got = wimm_log_read_writer(readers[i], id, from_seq,
					       (uint32_t)(d.upto - from_seq + 1), deliver, &d,
					       timeout_ms);
		if (got == WIMM_E_RANGE)
			return got;
		rc = got < 0 ? got : d.rc;
		if (rc)
			d.next = from_seq;
	}
	if (d.next == from_seq && !d.stop)
		return rc ? rc : WIMM_E_DISCONNECTED;
	return (int)(d.next - from_seq);
}
