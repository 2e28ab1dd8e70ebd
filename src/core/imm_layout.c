/* Typed imm layouts: named bit fields packed most significant first. */
#include <string.h>

#include "wimm.h"

int wimm_imm_layout_init(struct wimm_imm_layout *l, const struct wimm_imm_field *fields,
			 unsigned nfields)
{
	unsigned total = 0;

	if (!l || !fields || nfields == 0 || nfields > WIMM_IMM_MAX_FIELDS)
		return WIMM_E_INVAL;
	for (unsigned i = 0; i < nfields; i++) {
		if (!fields[i].name || fields[i].name[0] == '\0')
			return WIMM_E_INVAL;
		if (fields[i].bits == 0 || fields[i].bits > 32)
			return WIMM_E_RANGE;
		for (unsigned j = 0; j < i; j++)
			if (strcmp(fields[i].name, fields[j].name) == 0)
				return WIMM_E_INVAL;
		total += fields[i].bits;
	}
	if (total > 32)
		return WIMM_E_RANGE;

	memset(l, 0, sizeof(*l));
	l->nfields = nfields;
	/* First field takes the most significant bits, so a layout reads like
	 * a C bit-field diagram: {type:4 | seq:12 | len:16}. */
	unsigned used = 0;
	for (unsigned i = 0; i < nfields; i++) {
		l->field[i] = fields[i];
		used += fields[i].bits;
		l->shift[i] = (uint8_t)(32 - used);
		l->mask[i] = fields[i].bits == 32 ? UINT32_MAX : (1u << fields[i].bits) - 1;
	}
	return 0;
}

int wimm_imm_pack(const struct wimm_imm_layout *l, const uint32_t *values, uint32_t *imm)
{
	uint32_t out = 0;

	if (!l || !values || !imm || l->nfields == 0 || l->nfields > WIMM_IMM_MAX_FIELDS)
		return WIMM_E_INVAL;
	for (unsigned i = 0; i < l->nfields; i++) {
		if (values[i] > l->mask[i])
			return WIMM_E_RANGE;
		out |= values[i] << l->shift[i];
	}
	*imm = out;
	return 0;
}

int wimm_imm_unpack(const struct wimm_imm_layout *l, uint32_t imm, uint32_t *values)
{
	if (!l || !values || l->nfields == 0 || l->nfields > WIMM_IMM_MAX_FIELDS)
		return WIMM_E_INVAL;
	for (unsigned i = 0; i < l->nfields; i++)
		values[i] = (imm >> l->shift[i]) & l->mask[i];
	return 0;
}

int wimm_imm_field_index(const struct wimm_imm_layout *l, const char *name)
{
	if (!l || !name)
		return WIMM_E_INVAL;
	for (unsigned i = 0; i < l->nfields && i < WIMM_IMM_MAX_FIELDS; i++)
		if (l->field[i].name && strcmp(l->field[i].name, name) == 0)
			return (int)i;
	return WIMM_E_INVAL;
}
