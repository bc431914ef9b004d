// One PNG read by libpng row by row, as the reducer reads it (palettes and transparency expanded,
// 16 bits stripped): from the file itself, and from the copy whose image data libdeflate
// inflated (pk_png_inflated_copy, Sources/CPNGImageData), the copy's making included; the best of
// 5 runs each, and whether both gave the same rows. Prints "name size ms-libpng ms-copy same|differ"
// or "declined". Built and run by bench/png-deflate.sh.
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "png_image_data.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

typedef struct { const unsigned char *data; size_t size, at; } source;

static void on_read(png_structp png, png_bytep out, size_t length) {
    source *s = (source *)png_get_io_ptr(png);
    if (length > s->size - s->at) png_error(png, "short");
    memcpy(out, s->data + s->at, length);
    s->at += length;
}

static void on_warning(png_structp png, png_const_charp message) { (void)png; (void)message; }

/// Reads every row; returns a checksum of the rows (0 on error).
static unsigned long long read_rows(const unsigned char *data, size_t size) {
    source s = {data, size, 0};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, on_warning);
    png_infop info = png_create_info_struct(png);
    unsigned char *row = NULL;
    unsigned long long sum = 0;
    if (setjmp(png_jmpbuf(png))) {
        free(row);
        png_destroy_read_struct(&png, &info, NULL);
        return 0;
    }
    png_set_option(png, PNG_IGNORE_ADLER32, PNG_OPTION_ON);
    png_set_read_fn(png, &s, on_read);
    png_read_info(png, info);
    png_set_expand(png);
    png_set_strip_16(png);
    png_read_update_info(png, info);
    size_t bytes = png_get_rowbytes(png, info);
    row = malloc(bytes);
    for (uint32_t y = 0; y < png_get_image_height(png, info); y++) {
        png_read_row(png, row, NULL);
        for (size_t i = 0; i < bytes; i += 61) sum = sum * 1099511628211ULL + row[i] + 1;
    }
    free(row);
    png_destroy_read_struct(&png, &info, NULL);
    return sum;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: inflate FILE.png\n"); return 2; }
    FILE *file = fopen(argv[1], "rb");
    if (!file) { perror(argv[1]); return 1; }
    fseek(file, 0, SEEK_END);
    size_t size = (size_t)ftell(file);
    fseek(file, 0, SEEK_SET);
    unsigned char *data = malloc(size);
    if (fread(data, 1, size, file) != size) return 1;
    fclose(file);
    const char *name = strrchr(argv[1], '/') ? strrchr(argv[1], '/') + 1 : argv[1];
    double direct = 1e9, copied = 1e9;
    unsigned long long a = 0, b = 0;
    for (int run = 0; run < 5; run++) {
        double start = now_ms();
        a = read_rows(data, size);
        double took = now_ms() - start;
        if (took < direct) direct = took;
        start = now_ms();
        size_t length = 0;
        unsigned char *copy = pk_png_inflated_copy(data, size, 24u << 20, &length);
        if (!copy) { printf("%s %zu declined\n", name, size); return 0; }
        b = read_rows(copy, length);
        took = now_ms() - start;
        free(copy);
        if (took < copied) copied = took;
    }
    printf("%s %zu %.2f %.2f %s\n", name, size, direct, copied, a == b && a != 0 ? "same" : "differ");
    free(data);
    return 0;
}
