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
/* --child ROLE ARGS... (kv_test_roles.c): the role's exit status. */
int child_main(int argc, char **argv);
/* A value of key by writer, seq (kv_test_roles.c); 0 if v is whole and of key. */
void make_value(unsigned char *v, uint32_t key, uint32_t writer, uint32_t seq, uint32_t len);
int check_value(const unsigned char *v, size_t len, uint32_t key, uint32_t *writer, uint32_t *seq);

#endif
