/* A tiny check macro for the unit tests: print where and why, exit 1.
 * No framework: one executable per topic, ctest reads the exit status. */
#ifndef WIMM_TEST_CHECK_H
#define WIMM_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);   \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

/* Integer equality, printing both values so a failure explains itself. */
#define CHECK_EQ(a, b)                                                                             \
	do {                                                                                       \
		long long check_a_ = (long long)(a), check_b_ = (long long)(b);                    \
		if (check_a_ != check_b_) {                                                        \
			fprintf(stderr, "%s:%d: check failed: %s == %s (%lld != %lld)\n",          \
				__FILE__, __LINE__, #a, #b, check_a_, check_b_);                   \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

#endif
