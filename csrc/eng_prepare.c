/* Finalize-time helpers (csrc/eng_prepare.h): the HTP's symmetric requantization of 8-bit
 * weights (qnnemu/spec/quant.py _int8_requant, whose numpy formula is the reference), one pass
 * over the weights instead of numpy's eight. */
#include <math.h>
#include "eng_prepare.h"

/* w and out: [rows, channels] row-major (channel fastest).  For a channel with over[c] set,
 * out = round_half_away(w * mult[c]) with mult[c] = recip / 65536 (w * recip is an exact
 * integer below 2**26 and the scaling by 2**-16 is exact, so this is the numpy formula's value);
 * other channels are copied.  out may equal w. */
int qe_int8_requant(const double *w, int64_t rows, int64_t channels, const double *mult,
                    const uint8_t *over, double *out)
{
    if (rows < 0 || channels < 0)
        return 1;
    for (int64_t r = 0; r < rows; ++r) {
        const double *src = w + r * channels;
        double *dst = out + r * channels;
        for (int64_t c = 0; c < channels; ++c) {
            double v = src[c];
            if (over[c]) {
                double a = v * mult[c];
                /* |a| < 2**26: truncating |a| + 0.5 is its floor; the sign is put back as is */
                double m = (double)(int64_t)(fabs(a) + 0.5);
                v = copysign(m, a);
            }
            dst[c] = v;
        }
    }
    return 0;
}
