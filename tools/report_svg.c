/* optmem report --format svg: the picture of the plan, offset against time, one rectangle
 * per sampled block at the offset the report records, with live bytes and the lower bound. */
#include "report_domain.h"

#include <errno.h>
#include <string.h>

#define W 1200
#define PLOT_H 440
#define LEFT 90
#define RIGHT 30
#define TOP 56
#define STRIP_H 70 /* the whole-run timeline under the plot */
#define PANEL_H (TOP + PLOT_H + 40 + STRIP_H + 64)
#define PLOT_W (W - LEFT - RIGHT)

struct frame {
    uint64_t x0, x1, ymax; /* requests [x0, x1), bytes [0, ymax] */
};

static double px(const struct frame *f, uint64_t req)
{
    return LEFT + (double)PLOT_W * (double)(req - f->x0) / (double)(f->x1 - f->x0);
}

static double py(const struct frame *f, uint64_t bytes)
{
    return TOP + PLOT_H - (double)PLOT_H * (double)bytes / (double)f->ymax;
}

static unsigned hue(uint64_t site)
{
    return (unsigned)((site * 137508u / 1000u) % 360u); /* golden angle: neighbours differ */
}

static const char *title_note(const struct om_report *r, size_t drawn, size_t with_offset)
{
    if (!r->sample_has_offsets)
        return "live bytes only: this report has no block offsets (sample field \"offset\")";
    if (with_offset == 0)
        return "live bytes only: no sampled block lies in the plan arena (trace mode, or no "
               "plan yet)";
    if (drawn < with_offset)
        return "blocks at their arena offsets (capped: the earliest are drawn; --max-slices)";
    return "blocks at their arena offsets; blocks sharing bytes at other times share storage";
}

static void axes(FILE *out, const struct frame *f)
{
    char hb[32];
    fprintf(out, "<g class=\"axes\" font-size=\"11\" fill=\"#333\">\n");
    fprintf(out, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", LEFT,
            TOP + PLOT_H, W - RIGHT, TOP + PLOT_H);
    fprintf(out, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", LEFT, TOP,
            LEFT, TOP + PLOT_H);
    for (int k = 0; k <= 5; k++) {
        uint64_t req = f->x0 + (f->x1 - f->x0) * (uint64_t)k / 5;
        uint64_t bytes = f->ymax * (uint64_t)k / 5;
        fprintf(out, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%llu</text>\n", px(f, req),
                TOP + PLOT_H + 16, (unsigned long long)req);
        fprintf(out, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", LEFT - 6,
                py(f, bytes) + 4, om_human_bytes(bytes, hb, sizeof hb));
    }
    fprintf(out, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">request number</text>\n",
            LEFT + PLOT_W / 2, TOP + PLOT_H + 32);
    fprintf(out,
            "<text x=\"14\" y=\"%d\" transform=\"rotate(-90 14 %d)\" "
            "text-anchor=\"middle\">offset / bytes</text>\n</g>\n",
            TOP + PLOT_H / 2, TOP + PLOT_H / 2);
}

/* The earliest max_slices blocks with an offset, each with a tooltip. */
static void blocks(FILE *out, const struct om_report *r, const struct frame *f,
                   const struct om_render *o)
{
    char buf[512];
    size_t drawn = 0;
    fputs("<g class=\"blocks\" stroke=\"#222\" stroke-width=\"0.3\">\n", out);
    for (size_t i = 0; i < r->nlife; i++) {
        const struct om_rlife *l = &r->life[i];
        if (l->site == OM_NO_VALUE || l->offset == OM_NO_VALUE)
            continue;
        if (drawn >= o->max_slices)
            break;
        uint64_t end = l->death == OM_NO_VALUE ? f->x1 : l->death;
        double x = px(f, l->birth), y = py(f, l->offset + l->size);
        const char *label =
            om_site_name(o->sym, &r->sites[l->site], o->full_names, buf, sizeof buf);
        fprintf(out,
                "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
                "fill=\"hsl(%u,65%%,60%%)\" fill-opacity=\"0.85\"><title>site %llu ",
                x, y, px(f, end) - x, py(f, l->offset) - y, hue(l->site),
                (unsigned long long)r->sites[l->site].id);
        om_xml_escape(out, label);
        fprintf(out, ": %llu bytes at offset %llu, requests %llu..%llu%s</title></rect>\n",
                (unsigned long long)l->size, (unsigned long long)l->offset,
                (unsigned long long)l->birth, (unsigned long long)end,
                l->death == OM_NO_VALUE ? " (live at the report)" : "");
        drawn++;
    }
    fputs("</g>\n", out);
}

/* Live bytes as a step line, one point per pixel column at most (its maximum). */
static void live_curve(FILE *out, const struct om_report *r, const struct frame *f)
{
    if (r->nlife == 0)
        return;
    fputs("<path class=\"live\" fill=\"none\" stroke=\"#000\" stroke-width=\"1.2\" d=\"", out);
    size_t per = r->nlife / PLOT_W + 1;
    for (size_t i = 0; i < r->nlife; i += per) {
        uint64_t v = 0;
        for (size_t k = i; k < i + per && k < r->nlife; k++)
            v = r->live_after[k] > v ? r->live_after[k] : v;
        uint64_t end = r->sample_first + (i + per < r->nlife ? i + per : r->nlife);
        if (i == 0)
            fprintf(out, "M%.2f,%.2f H%.2f", px(f, r->sample_first), py(f, v), px(f, end));
        else
            fprintf(out, " V%.2f H%.2f", py(f, v), px(f, end));
    }
    fputs("\"><title>live bytes after each request</title></path>\n", out);
}

static void hline(FILE *out, const struct frame *f, uint64_t bytes, const char *what,
                  const char *dash, const char *colour)
{
    char hb[32];
    double y = py(f, bytes);
    fprintf(out,
            "<line class=\"%s\" x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"%s\" "
            "stroke-dasharray=\"%s\" stroke-width=\"1.5\"/>\n",
            what[0] == 'l' ? "lower-bound" : "plan-peak", LEFT, y, W - RIGHT, y, colour, dash);
    fprintf(out,
            "<text x=\"%d\" y=\"%.2f\" text-anchor=\"%s\" font-size=\"11\" fill=\"%s\">%s "
            "%s</text>\n",
            what[0] == 'l' ? W - RIGHT - 4 : LEFT + 4, y - 4, what[0] == 'l' ? "end" : "start",
            colour, what, om_human_bytes(bytes, hb, sizeof hb)); /* apart when the two meet */
}

/* The whole run, downsampled by the tracer: where the sample sits in it. */
static void strip(FILE *out, const struct om_report *r)
{
    uint64_t top = 1;
    for (size_t k = 0; k < r->ntimeline; k++)
        top = r->timeline[k] > top ? r->timeline[k] : top;
    int y0 = TOP + PLOT_H + 48;
    fprintf(out,
            "<g class=\"timeline\"><text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#333\">whole "
            "run: live bytes (max per %llu requests), %zu points</text>\n",
            LEFT, y0 - 4, (unsigned long long)r->timeline_width, r->ntimeline);
    fprintf(out, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#f4f4f4\"/>\n", LEFT,
            y0, PLOT_W, STRIP_H);
    if (r->ntimeline > 0) {
        fputs("<path fill=\"none\" stroke=\"#36c\" stroke-width=\"1\" d=\"", out);
        for (size_t k = 0; k < r->ntimeline; k++)
            fprintf(out, "%s%.2f,%.2f", k ? " L" : "M",
                    LEFT + (double)PLOT_W * ((double)k + 0.5) / (double)r->ntimeline,
                    y0 + STRIP_H - (double)STRIP_H * (double)r->timeline[k] / (double)top);
        fputs("\"/>\n", out);
    }
    fputs("</g>\n", out);
}

#define LEGEND_CHARS 27

static void legend(FILE *out, const struct om_report *r, const struct om_render *o)
{
    char buf[512];
    int x = LEFT, y = PANEL_H - 14;
    fputs("<g class=\"legend\">", out);
    for (size_t i = 0; i < r->npeak && i < 6; i++) {
        const char *label =
            om_site_name(o->sym, &r->sites[r->peak[i].site], o->full_names, buf, sizeof buf);
        fprintf(out,
                "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"hsl(%u,65%%,60%%)\"/>"
                "<text x=\"%d\" y=\"%d\" font-size=\"11\">site %llu ",
                x, y - 9, hue(r->peak[i].site), x + 14, y,
                (unsigned long long)r->sites[r->peak[i].site].id);
        /* A legend entry has room for about 27 characters of 11 px text, "site N " included
         * (tests/report/check_layout.py measures them in Chromium): a long name keeps its
         * start, cut at a character boundary. */
        char cut[64], id[32];
        size_t room =
            LEGEND_CHARS - (size_t)snprintf(id, sizeof id, "site %llu ",
                                            (unsigned long long)r->sites[r->peak[i].site].id);
        snprintf(cut, sizeof cut, "%s", label);
        if (strlen(label) > room) {
            size_t at = room - 1;
            while (at > 0 && (cut[at] & 0xc0) == 0x80)
                at--;
            memcpy(cut + at, "\xe2\x80\xa6", 4);
        }
        om_xml_escape(out, cut);
        fputs("</text>\n", out);
        x += 180;
    }
    fputs("</g>\n", out);
}

int om_svg_panel(FILE *out, const struct om_report *r, const struct om_render *o, bool standalone)
{
    return om_svg_panel_in(out, r, o, standalone, OM_HOST_DOMAIN);
}

int om_svg_panel_in(FILE *out, const struct om_report *r, const struct om_render *o,
                    bool standalone, const char *domain)
{
    struct frame f = {r->sample_first, r->sample_end, r->lower_bound};
    if (f.x1 <= f.x0)
        f.x1 = f.x0 + 1;
    for (size_t i = 0; i < r->nlife; i++) {
        const struct om_rlife *l = &r->life[i];
        f.ymax = r->live_after[i] > f.ymax ? r->live_after[i] : f.ymax;
        if (l->site != OM_NO_VALUE && l->offset != OM_NO_VALUE && l->offset + l->size > f.ymax)
            f.ymax = l->offset + l->size;
    }
    if (r->serving.present && r->serving.plan_peak_bytes > f.ymax)
        f.ymax = r->serving.plan_peak_bytes;
    f.ymax = f.ymax + f.ymax / 20 + 1;

    fprintf(out,
            "<svg %swidth=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\">\n",
            standalone ? "xmlns=\"http://www.w3.org/2000/svg\" " : "", W, PANEL_H, W, PANEL_H);
    size_t with_offset = 0;
    for (size_t i = 0; i < r->nlife; i++)
        with_offset += r->life[i].site != OM_NO_VALUE && r->life[i].offset != OM_NO_VALUE;
    size_t drawn = with_offset < o->max_slices ? with_offset : o->max_slices;
    const char *note = title_note(r, drawn, with_offset);
    char head[1024];
    int len = snprintf(head, sizeof head, "pid %lld rank %lld%s%s:", (long long)r->pid,
                       (long long)r->rank, om_domain_is_host(domain) ? "" : " ",
                       om_domain_is_host(domain) ? "" : domain);
    for (size_t i = 0; i < r->argc && len > 0 && (size_t)len < sizeof head; i++)
        len += snprintf(head + len, sizeof head - (size_t)len, " %s", r->argv[i]);
    fputs("<title>", out);
    om_xml_escape(out, head);
    fprintf(out, ": %s</title>\n<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n", note);
    fprintf(out, "<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">", LEFT);
    om_xml_escape(out, head);
    fprintf(out,
            "</text>\n<text x=\"%d\" y=\"40\" font-size=\"12\" fill=\"#333\">requests "
            "%llu..%llu: %s (%zu of %zu blocks drawn)</text>\n",
            LEFT, (unsigned long long)f.x0, (unsigned long long)r->sample_end, note, drawn,
            with_offset);
    fputs("<g class=\"plot\">\n", out);
    if (r->starts && r->nstarts <= 400) {
        fputs("<g class=\"iterations\" stroke=\"#ccc\">\n", out);
        for (size_t k = 0; k < r->nstarts; k++)
            if (r->starts[k] >= f.x0 && r->starts[k] < f.x1)
                fprintf(out, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\"/>\n",
                        px(&f, r->starts[k]), TOP, px(&f, r->starts[k]), TOP + PLOT_H);
        fputs("</g>\n", out);
    }
    blocks(out, r, &f, o);
    live_curve(out, r, &f);
    hline(out, &f, r->lower_bound, "lower bound", "6,4", "#c00");
    if (r->serving.present && r->serving.plans > 0)
        hline(out, &f, r->serving.plan_peak_bytes, "plan peak", "2,3", "#06c");
    fputs("</g>\n", out);
    axes(out, &f);
    strip(out, r);
    legend(out, r, o);
    fputs("</svg>\n", out);
    return ferror(out) ? -EIO : 0;
}

int om_render_svg(const struct om_merged *m, const struct om_render *o)
{
    const struct om_domain_view host = {OM_HOST_DOMAIN, NULL};
    return om_render_svg_in(m, o, &host);
}

int om_render_svg_in(const struct om_merged *m, const struct om_render *o,
                     const struct om_domain_view *v)
{
    FILE *out = o->out;
    int rc = 0;
    fprintf(out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    if (m->nreports == 1)
        return om_svg_panel_in(out, &m->reports[0], o, true, v->shown);
    /* Several processes: one panel each, stacked. */
    fprintf(out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%zu\" "
            "font-family=\"sans-serif\">\n<title>optmem: %zu processes</title>\n",
            W, (size_t)PANEL_H * m->nreports, m->nreports);
    for (size_t i = 0; i < m->nreports && rc == 0; i++) {
        fprintf(out, "<g transform=\"translate(0 %zu)\">\n", (size_t)PANEL_H * i);
        rc = om_svg_panel_in(out, &m->reports[i], o, false, v->shown);
        fputs("</g>\n", out);
    }
    fputs("</svg>\n", out);
    return rc ? rc : ferror(out) ? -EIO : 0;
}
