/* SPDX-License-Identifier: MIT */
/*
 * kernels.c - the arithmetic of the example programs (kernels.h).
 */
#include "kernels.h"

#include <stdlib.h>
#include <string.h>

void grid_init_row(double *row, uint64_t n, uint64_t seed, uint64_t i)
{
	for (uint64_t j = 0; j < n; j++)
		row[j] = gen_unit(seed, STREAM_GRID, i * n + j);
}

void jacobi_row(double *restrict out, const double *restrict up,
                const double *restrict mid, const double *restrict down,
                uint64_t n)
{
	for (uint64_t j = 1; j + 1 < n; j++)
		out[j] = 0.25 * (up[j] + down[j] + mid[j - 1] + mid[j + 1]);
}

double *jacobi_sweeps(double *a, double *b, uint64_t n, uint64_t iterations)
{
	for (uint64_t it = 0; it < iterations; it++) {
		for (uint64_t i = 1; i + 1 < n; i++)
			jacobi_row(&b[i * n], &a[(i - 1) * n], &a[i * n], &a[(i + 1) * n], n);
		double *t = a;
		a = b;
		b = t;
	}
	return a;
}

void sor_row(double *mid, const double *up, const double *down, uint64_t n,
             uint64_t i, unsigned colour, double omega)
{
	/* The first interior column of this colour: (i + j) % 2 == colour. */
	uint64_t j = 1 + ((i + 1 + colour) & 1);

	for (; j + 1 < n; j += 2)
		mid[j] = (1.0 - omega) * mid[j] +
		         omega * 0.25 * (up[j] + down[j] + mid[j - 1] + mid[j + 1]);
}

void sor_sweeps(double *g, uint64_t n, uint64_t iterations, double omega)
{
	for (uint64_t it = 0; it < iterations; it++)
		for (unsigned colour = 0; colour < 2; colour++)
			for (uint64_t i = 1; i + 1 < n; i++)
				sor_row(&g[i * n], &g[(i - 1) * n], &g[(i + 1) * n], n, i,
				        colour, omega);
}

void matrix_init_row(double *row, uint64_t n, uint64_t seed, uint64_t stream,
                     uint64_t i)
{
	for (uint64_t k = 0; k < n; k++)
		row[k] = gen_unit(seed, stream, i * n + k) - 0.5;
}

void matmul_row(double *restrict c, const double *restrict a,
                const double *restrict b, uint64_t n)
{
	/* i-k-j order: c[j] still sums a[k] * b[k][j] over k = 0..n-1 in
	 * order, but b is read along its rows. */
	for (uint64_t j = 0; j < n; j++)
		c[j] = 0.0;
	for (uint64_t k = 0; k < n; k++) {
		const double aik = a[k];
		const double *bk = &b[k * n];

		for (uint64_t j = 0; j < n; j++)
			c[j] += aik * bk[j];
	}
}

uint32_t item_value(uint64_t seed, uint64_t i)
{
	return (uint32_t)(gen_u64(seed, STREAM_ITEMS, i) >> 32);
}

/* Task sizes: chunk/2 + a number in 0..chunk, at least 1. */
static uint64_t min_task(uint64_t chunk)
{
	return chunk / 2 ? chunk / 2 : 1;
}

uint64_t histogram_max_tasks(uint64_t items, uint64_t chunk)
{
	return (items + min_task(chunk) - 1) / min_task(chunk);
}

uint64_t histogram_tasks(uint64_t seed, uint64_t items, uint64_t chunk,
                         uint64_t *starts)
{
	uint64_t t = 0, at = 0;

	while (at < items) {
		uint64_t size = chunk / 2 + gen_u64(seed, STREAM_TASKS, t) % (chunk + 1);

		if (size == 0)
			size = 1;
		starts[t++] = at;
		at = size < items - at ? at + size : items;
	}
	starts[t] = items;
	return t;
}

void histogram_count(const uint32_t *items, uint64_t count, uint64_t bins,
                     uint64_t *hist)
{
	for (uint64_t i = 0; i < count; i++)
		hist[bin_of(items[i], bins)]++;
}

uint64_t jacobi_reference(const struct options *o)
{
	uint64_t n = o->n;
	double *a = xmalloc(n * n * sizeof *a), *b = xmalloc(n * n * sizeof *b);

	for (uint64_t i = 0; i < n; i++) {
		grid_init_row(&a[i * n], n, o->seed, i);
		grid_init_row(&b[i * n], n, o->seed, i);
	}
	uint64_t sum = fnv1a64(jacobi_sweeps(a, b, n, o->iterations), n * n * sizeof *a);
	free(a);
	free(b);
	return sum;
}

uint64_t sor_reference(const struct options *o)
{
	uint64_t n = o->n;
	double *g = xmalloc(n * n * sizeof *g);

	for (uint64_t i = 0; i < n; i++)
		grid_init_row(&g[i * n], n, o->seed, i);
	sor_sweeps(g, n, o->iterations, o->omega);
	uint64_t sum = fnv1a64(g, n * n * sizeof *g);
	free(g);
	return sum;
}

uint64_t matmul_reference(const struct options *o)
{
	uint64_t n = o->n;
	double *a = xmalloc(n * n * sizeof *a), *b = xmalloc(n * n * sizeof *b);
	double *c = xmalloc(n * n * sizeof *c);

	for (uint64_t i = 0; i < n; i++) {
		matrix_init_row(&a[i * n], n, o->seed, STREAM_A, i);
		matrix_init_row(&b[i * n], n, o->seed, STREAM_B, i);
	}
	for (uint64_t i = 0; i < n; i++)
		matmul_row(&c[i * n], &a[i * n], b, n);
	uint64_t sum = fnv1a64(c, n * n * sizeof *c);
	free(a);
	free(b);
	free(c);
	return sum;
}

uint64_t histogram_reference(const struct options *o)
{
	uint32_t *items = xmalloc(o->items * sizeof *items);
	uint64_t *hist = xcalloc(o->bins, sizeof *hist);

	for (uint64_t i = 0; i < o->items; i++)
		items[i] = item_value(o->seed, i);
	histogram_count(items, o->items, o->bins, hist);
	uint64_t sum = fnv1a64(hist, o->bins * sizeof *hist);
	free(items);
	free(hist);
	return sum;
}
