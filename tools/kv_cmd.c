/* `wimm kv`: the key-value slot pool service (include/wimm/kv.h).
 *
 *   wimm kv serve --memory SIZE [-f FABRIC] [--port P] [--clients N] [--lease MS]
 *                 [--grant MS] [--index SIZE] [--spin] [-v]
 *   wimm kv put  [-f FABRIC] [--pin] HOST[:PORT] KEY [FILE|-]
 *   wimm kv get  [-f FABRIC] HOST[:PORT] KEY
 *   wimm kv del  [-f FABRIC] HOST[:PORT] KEY
 *   wimm kv stat [-f FABRIC] HOST[:PORT]
 *   wimm kv bench [flags]                  (kv_bench.c)
 *
 * Exit status: 0 done, 1 failed (not found, pool full, unreachable ...),
 * 2 bad usage.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "kv_cmd.h"

static void kv_usage(FILE *f)
{
	fputs("usage: wimm kv serve --memory SIZE [-f FABRIC] [--port P] [--clients N]\n"
	      "                     [--lease MS] [--grant MS] [--index SIZE] [--spin] [-v]\n"
	      "       wimm kv put  [-f FABRIC] [--pin] HOST[:PORT] KEY [FILE|-]\n"
	      "       wimm kv get  [-f FABRIC] HOST[:PORT] KEY     (the value on stdout)\n"
	      "       wimm kv del  [-f FABRIC] HOST[:PORT] KEY\n"
	      "       wimm kv stat [-f FABRIC] HOST[:PORT]\n"
	      "       wimm kv bench [-f FABRIC] [-n OPS] [--rounds R] [--spin] [--no-redis]\n"
	      "\n"
	      "  --memory SIZE  slot memory, K/M/G suffixes (e.g. 64M); split into one arena\n"
	      "                 per client (--clients, default 16), a power of two each\n"
	      "  -f FABRIC      auto, ofi:tcp, ofi:shm, verbs:rxe0 (default auto; clients\n"
	      "                 and server must agree)\n"
	      "  --port P       control port (default 7480); reads use the next port\n"
	      "  --lease MS     how long a reader may read a looked-up slot (default 1000)\n"
	      "  --grant MS     how long a granted slot waits for its value (default 10000)\n"
	      "  --index SIZE   a shared index of SIZE bytes (4K..1G; memory/32 suits):\n"
	      "                 clients publish by compare-and-swap and get one-sided,\n"
	      "                 on the port after the reads'; admit trusted clients only\n"
	      "  --spin         serve spinning, never sleeping (on ofi:shm a sleeping server\n"
	      "                 serves one-sided reads and swaps only at its 1 ms tick)\n"
	      "  --pin          never evict this key\n"
	      "exit status: 0 done, 1 failed (e.g. \"not found\"), 2 bad usage\n",
	      f);
}

static _Noreturn void bad_usage(const char *fmt, const char *arg)
{
	cli_bad_usage("wimm kv", kv_usage, fmt, arg);
}

int kv_parse_size(const char *text, unsigned long long *out)
{
	char *end;
	if (!text || text[0] < '0' || text[0] > '9')
		return -1;
	errno = 0;
	unsigned long long v = strtoull(text, &end, 10);
	if (errno)
		return -1;
	/* K, M, G (either case): 2^10, 2^20, 2^30. */
	static const char suffixes[] = "kKmMgG";
	const char *suffix = *end ? strchr(suffixes, *end) : NULL;
	if (*end && (!suffix || end[1]))
		return -1;
	unsigned shift = suffix ? 10u * (unsigned)((suffix - suffixes) / 2 + 1) : 0;
	if (suffix)
		end++;
	if (*end || v > (~0ull >> shift))
		return -1;
	*out = v << shift;
	return 0;
}

void kv_host_addr(const char *host, char *out, size_t len)
{
	char port[8];
	snprintf(port, sizeof(port), "%d", KV_DEFAULT_PORT);
	cli_host_addr(host, port, out, len);
}

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static int verbose;

static void log_line(void *arg, enum wimm_log_level level, const char *msg)
{
	(void)arg;
	if (level <= WIMM_LOG_WARN || verbose)
		fprintf(stderr, "wimm kv serve: %s\n", msg);
}

void kv_print_stats(FILE *f, const struct wimm_kv_stats *st)
{
	fprintf(f,
		"memory %llu  arena %llu  used %llu  keys %llu  pinned %llu  clients %llu\n"
		"puts %llu (by send %llu)  gets %llu  hits %llu  deletes %llu  evictions %llu\n"
		"full %llu  bad_puts %llu  grants_pending %llu  grants_reclaimed %llu  "
		"grants_expired %llu  retired %llu\n"
		"index_words %llu  index_pending %llu  foreign_words %llu\n",
		(unsigned long long)st->memory, (unsigned long long)st->arena,
		(unsigned long long)st->used, (unsigned long long)st->keys,
		(unsigned long long)st->pinned, (unsigned long long)st->clients,
		(unsigned long long)st->puts, (unsigned long long)st->send_puts,
		(unsigned long long)st->gets, (unsigned long long)st->hits,
		(unsigned long long)st->deletes, (unsigned long long)st->evictions,
		(unsigned long long)st->full, (unsigned long long)st->bad_puts,
		(unsigned long long)st->grants_pending, (unsigned long long)st->grants_reclaimed,
		(unsigned long long)st->grants_expired, (unsigned long long)st->retired,
		(unsigned long long)st->index_words, (unsigned long long)st->index_pending,
		(unsigned long long)st->foreign_words);
}

static int kv_serve(int argc, char **argv)
{
	unsigned long long memory = 0, v;
	struct wimm_kv_server_attr attr = {.fabric = "auto", .log = log_line};
	int port = KV_DEFAULT_PORT;
	char addr[64];

	for (int i = 1; i < argc; i++) {
		const char *o = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(o, "-v") == 0) {
			verbose = 1;
			continue;
		}
		if (strcmp(o, "--spin") == 0) {
			attr.ctx_flags |= WIMM_CTX_POLLING;
			continue;
		}
		if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
			kv_usage(stdout);
			return 0;
		}
		if (!val)
			bad_usage("%s needs a value", o);
		i++;
		if (strcmp(o, "--memory") == 0) {
			if (kv_parse_size(val, &memory) < 0 || memory == 0)
				bad_usage("bad size '%s' for --memory (e.g. 64M)", val);
		} else if (strcmp(o, "-f") == 0) {
			attr.fabric = val;
		} else if (strcmp(o, "--port") == 0 || strcmp(o, "-p") == 0) {
			if (kv_parse_size(val, &v) < 0 || v > 65534)
				bad_usage("bad port '%s'", val);
			port = (int)v;
		} else if (strcmp(o, "--clients") == 0) {
			if (kv_parse_size(val, &v) < 0 || v == 0 || v > 4096)
				bad_usage("bad client count '%s' (1..4096)", val);
			attr.max_clients = (uint32_t)v;
		} else if (strcmp(o, "--lease") == 0) {
			if (kv_parse_size(val, &v) < 0 || v < 10 || v > 600000)
				bad_usage("bad lease '%s' (10..600000 ms)", val);
			attr.lease_ms = (uint32_t)v;
		} else if (strcmp(o, "--grant") == 0) {
			if (kv_parse_size(val, &v) < 0 || v < 10 || v > 600000)
				bad_usage("bad grant time '%s' (10..600000 ms)", val);
			attr.grant_ms = (uint32_t)v;
		} else if (strcmp(o, "--index") == 0) {
			if (kv_parse_size(val, &v) < 0 || v < 4096 || v > (1ull << 30))
				bad_usage("bad index size '%s' (4K..1G)", val);
			attr.index_bytes = (size_t)v;
		} else {
			bad_usage("unknown flag '%s'", o);
		}
	}
	if (!memory)
		bad_usage("%s needs --memory SIZE", "serve");
	attr.memory = (size_t)memory;
	uint32_t clients = attr.max_clients ? attr.max_clients : 16;
	if (memory / clients < 4096) {
		fprintf(stderr,
			"wimm kv serve: --memory %llu is too small for %u clients (4 KiB "
			"each at least)\n",
			memory, clients);
		return 2;
	}
	snprintf(addr, sizeof(addr), "0.0.0.0:%d", port);
	attr.addr = addr;
	struct wimm_kv_server *s;
	int rc = wimm_kv_server_new(&attr, &s);
	if (rc < 0) {
		fprintf(stderr, "wimm kv serve: cannot serve on %s (%s): %s\n", addr, attr.fabric,
			wimm_kv_strerror(rc));
		return 1;
	}
	struct wimm_kv_stats st;
	wimm_kv_server_stats(s, &st);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	printf("wimm kv serve: %s, port %d (reads on the next), %llu bytes in arenas of %llu\n",
	       attr.fabric, wimm_kv_server_port(s), (unsigned long long)st.memory,
	       (unsigned long long)st.arena);
	if (attr.index_bytes)
		printf("wimm kv serve: shared index of %llu words on port %d\n",
		       (unsigned long long)st.index_words, wimm_kv_server_index_port(s));
	fflush(stdout);
	while (!stop) {
		rc = wimm_kv_server_run(s, 100);
		if (rc < 0) {
			fprintf(stderr, "wimm kv serve: %s\n", wimm_kv_strerror(rc));
			break;
		}
	}
	wimm_kv_server_stats(s, &st);
	kv_print_stats(stdout, &st);
	wimm_kv_server_delete(&s);
	return rc < 0 ? 1 : 0;
}

/* Read all of f (at most max bytes). */
static unsigned char *read_all(FILE *f, size_t max, size_t *len)
{
	size_t cap = 65536, got = 0;
	unsigned char *b = malloc(cap);
	while (b) {
		if (got == cap) {
			unsigned char *nb = cap > max ? NULL : realloc(b, cap * 2);
			if (!nb) {
				free(b);
				return NULL;
			}
			b = nb;
			cap *= 2;
		}
		size_t r = fread(b + got, 1, cap - got, f);
		got += r;
		if (r == 0)
			break;
	}
	if (b && (ferror(f) || got > max)) {
		free(b);
		return NULL;
	}
	*len = got;
	return b;
}

static int kv_client_cmd(const char *cmd, int argc, char **argv)
{
	const char *fabric = "auto", *pos[3] = {NULL, NULL, NULL};
	int npos = 0, pin = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-f") == 0 && i + 1 < argc)
			fabric = argv[++i];
		else if (strcmp(argv[i], "--pin") == 0 && strcmp(cmd, "put") == 0)
			pin = 1;
		else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
			return kv_usage(stdout), 0;
		else if (argv[i][0] == '-' && argv[i][1] != '\0')
			bad_usage("unknown flag '%s'", argv[i]);
		else if (npos < 3)
			pos[npos++] = argv[i];
		else
			bad_usage("unexpected argument '%s'", argv[i]);
	}
	int want = strcmp(cmd, "stat") == 0 ? 1 : 2;
	if (npos < want || npos > (strcmp(cmd, "put") == 0 ? 3 : want))
		bad_usage("wrong arguments for %s", cmd);
	const char *key = pos[1];
	if (key && (strlen(key) == 0 || strlen(key) > WIMM_KV_MAX_KEY)) {
		fprintf(stderr, "wimm kv %s: a key is 1..%u bytes\n", cmd, WIMM_KV_MAX_KEY);
		return 2;
	}
	char addr[300];
	kv_host_addr(pos[0], addr, sizeof(addr));
	unsigned char *value = NULL;
	size_t len = 0;
	if (strcmp(cmd, "put") == 0) {
		FILE *f = stdin;
		if (pos[2] && strcmp(pos[2], "-") != 0 && !(f = fopen(pos[2], "rb"))) {
			fprintf(stderr, "wimm kv put: %s: %s\n", pos[2], strerror(errno));
			return 1;
		}
		value = read_all(f, WIMM_KV_MAX_SLOT - WIMM_KV_HEADER, &len);
		if (f != stdin)
			fclose(f);
		if (!value) {
			fprintf(stderr, "wimm kv put: cannot read the value (at most %u bytes)\n",
				WIMM_KV_MAX_SLOT - WIMM_KV_HEADER);
			return 1;
		}
	}
	struct wimm_kv_client_attr ca = {.fabric = fabric};
	struct wimm_kv_client *c = NULL;
	int rc = wimm_kv_connect(addr, &ca, &c);
	if (rc < 0) {
		fprintf(stderr, "wimm kv %s: cannot reach a kv server at %s (%s): %s\n", cmd, addr,
			fabric, wimm_kv_strerror(rc));
		free(value);
		return 1;
	}
	if (strcmp(cmd, "put") == 0) {
		rc = wimm_kv_put(c, key, strlen(key), value, len, pin ? WIMM_KV_PIN : 0);
	} else if (strcmp(cmd, "get") == 0) {
		value = malloc(WIMM_KV_MAX_SLOT);
		rc = value ? wimm_kv_get(c, key, strlen(key), value, WIMM_KV_MAX_SLOT, &len)
			   : WIMM_E_NOMEM;
		if (rc == 0 && fwrite(value, 1, len, stdout) != len)
			rc = WIMM_E_INVAL;
	} else if (strcmp(cmd, "del") == 0) {
		rc = wimm_kv_del(c, key, strlen(key));
	} else {
		struct wimm_kv_stats st;
		rc = wimm_kv_stat(c, &st);
		if (rc == 0)
			kv_print_stats(stdout, &st);
	}
	wimm_kv_close(&c);
	free(value);
	if (rc == WIMM_KV_E_NOTFOUND) {
		fprintf(stderr, "wimm kv %s: %s: not found\n", cmd, key);
		return 1;
	}
	if (rc < 0) {
		fprintf(stderr, "wimm kv %s%s%s: %s\n", cmd, key ? " " : "", key ? key : "",
			wimm_kv_strerror(rc));
		return 1;
	}
	return 0;
}

int kv_main(int argc, char **argv)
{
	if (argc < 2) {
		kv_usage(stderr);
		return 2;
	}
	const char *cmd = argv[1];
	if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
		kv_usage(stdout);
		return 0;
	}
	if (strcmp(cmd, "serve") == 0)
		return kv_serve(argc - 1, argv + 1);
	if (strcmp(cmd, "bench") == 0)
		return kv_bench(argc - 1, argv + 1);
	if (strcmp(cmd, "put") == 0 || strcmp(cmd, "get") == 0 || strcmp(cmd, "del") == 0 ||
	    strcmp(cmd, "stat") == 0)
		return kv_client_cmd(cmd, argc - 1, argv + 1);
	bad_usage("unknown kv command '%s'", cmd);
}
