/* SHA-256 (FIPS 180-4), for the C tests only: the tests compare tensor
 * bytes with the fixtures' sha256 and must not depend on a crypto library
 * being installed. Checked against the standard's test vectors at start. */
#ifndef TF_TEST_SHA256_H
#define TF_TEST_SHA256_H

#include <stddef.h>
#include <stdint.h>

/* Writes the lowercase hex digest of data[0..len) and a NUL to hex[65]. */
void sha256_hex(const void *data, size_t len, char hex[65]);

#endif
