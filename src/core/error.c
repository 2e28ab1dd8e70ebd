/* The error table: one row per WIMM_E_* in wimm.h's WIMM_ERRNO_MAP. */
#include "wimm.h"

const char *wimm_err_name(int err)
{
	switch (err) {
	case 0:
		return "WIMM_OK";
#define WIMM_X_NAME(name, num, text)                                                               \
	case -(num):                                                                               \
		return "WIMM_E_" #name;
		WIMM_ERRNO_MAP(WIMM_X_NAME)
#undef WIMM_X_NAME
	default:
		return "WIMM_E_UNKNOWN";
	}
}

const char *wimm_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
#define WIMM_X_TEXT(name, num, text)                                                               \
	case -(num):                                                                               \
		return text;
		WIMM_ERRNO_MAP(WIMM_X_TEXT)
#undef WIMM_X_TEXT
	default:
		return "unknown error";
	}
}
