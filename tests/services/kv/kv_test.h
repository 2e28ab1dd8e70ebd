/* Shared by the kv_test sources. */
#ifndef KV_TEST_H
#define KV_TEST_H

#include <wimm/kv.h>

#include "svc_test.h"

/* Print why (with the pid) and exit with status 1. */
_Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double now_s(void);
/* hostile FABRIC ADDR (kv_test_hostile.c). */
int role_hostile(char **a);
/* leaser FABRIC ADDR (kv_test_hostile.c). */
int role_leaser(char **a);
/* The shared index's roles (kv_test_index.c): the role's exit status, or
 * -1 when ROLE is none of them. */
int index_role(const char *role, int argc, char **a);
/* A client of the test, and the server's counters through it (both die on
 * error). */
struct wimm_kv_client *kv_open(const char *fabric, const char *addr);
struct wimm_kv_stats stat_of(struct wimm_kv_client *c);
/* --child ROLE ARGS... (kv_test_roles.c): the role's exit status. */
int child_main(int argc, char **argv);
/* A value of key by writer, seq (kv_test_roles.c); 0 if v is whole and of key. */
void make_value(unsigned char *v, uint32_t key, uint32_t writer, uint32_t seq, uint32_t len);
int check_value(const unsigned char *v, size_t len, uint32_t key, uint32_t *writer, uint32_t *seq);

/* A client speaking the protocol by hand over a raw wimm connection
 * (kv_test_hostile.c). */
struct raw {
	struct wimm_ctx *ctx;
	struct wimm_conn *c;
	struct wimm_mr *mr;
	unsigned char buf[65536], reply[256];
};
/* Wait for the answer with imm `want`; its status (dies past 10 s). */
int raw_wait(struct raw *r, uint32_t want);
/* Open a context, connect to the control port of a[1] and take the hello
 * (left in r->reply). */
void raw_open(struct raw *r, char **a, const char *who);
/* A grant for key "key" of len bytes: its id, offset, version (the rest of
 * the answer in r->reply). */
void raw_grant(struct raw *r, const char *key, uint32_t len, uint32_t seq, uint32_t *gid,
	       uint64_t *off, uint64_t *version);

#endif
