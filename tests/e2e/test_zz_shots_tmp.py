from tests.e2e.test_browser_mech import open_page
from tests.e2e.test_tour_e2e import at_step
from tests.e2e.test_label_overlap import overlapping


K = (9,)


def test_shots(st_app, browser):
    for size, present in (((1024, 768), True), ((1024, 768), False), ((1400, 1000), False)):
        ctx = browser.new_context(viewport={"width": size[0], "height": size[1]})
        page = ctx.new_page()
        for k in K:
            open_page(page, f"{st_app['url']}/tour?step={k}" + ("&present=1" if present else ""))
            at_step(page, k)
            page.wait_for_timeout(800)
            print(k, size, present, "overlaps", overlapping(page))
            page.screenshot(path=f"/tmp/tourshots/b{k}-{size[0]}-{int(present)}.png")
        ctx.close()
