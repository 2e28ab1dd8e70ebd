/* Unit tests of the error table: every WIMM_E_* code has its own name and
 * text, and anything else reads "unknown error". */
#include <string.h>

#include "check.h"
#include "wimm.h"

struct expect {
	int code;
	const char *name;
	const char *text;
};

static const struct expect table[] = {
#define X(n, num, t) {WIMM_E_##n, "WIMM_E_" #n, t},
    WIMM_ERRNO_MAP(X)
#undef X
};

#define NCODES (sizeof(table) / sizeof(table[0]))

int main(void)
{
	CHECK_EQ(NCODES, 24);
	for (size_t i = 0; i < NCODES; i++) {
		const char *name = wimm_err_name(table[i].code);
		const char *text = wimm_strerror(table[i].code);

		CHECK(table[i].code < 0);
		CHECK(name != NULL);
		CHECK(text != NULL);
		if (strcmp(name, table[i].name) != 0) {
			fprintf(stderr, "code %d: name \"%s\", expected \"%s\"\n", table[i].code,
				name, table[i].name);
			return 1;
		}
		CHECK(strcmp(text, table[i].text) == 0);
		CHECK(strcmp(text, "unknown error") != 0);
		for (size_t j = 0; j < i; j++) {
			CHECK(table[i].code != table[j].code);
			CHECK(strcmp(name, wimm_err_name(table[j].code)) != 0);
			CHECK(strcmp(text, wimm_strerror(table[j].code)) != 0);
		}
	}

	/* Success has a text of its own, not one of the errors'. */
	CHECK(wimm_strerror(WIMM_OK) != NULL);
	CHECK(wimm_err_name(WIMM_OK) != NULL);
	for (size_t i = 0; i < NCODES; i++)
		CHECK(strcmp(wimm_strerror(WIMM_OK), table[i].text) != 0);

	/* Codes no one defined: positive errno-like values, gaps, extremes. */
	static const int unknown[] = {-25, -100, 1, 5, 22, -1000000, 2147483647, -2147483647 - 1};
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		CHECK(strcmp(wimm_strerror(unknown[i]), "unknown error") == 0);
		CHECK(strcmp(wimm_err_name(unknown[i]), "WIMM_E_UNKNOWN") == 0);
	}
	printf("unit.error: ok\n");
	return 0;
}
