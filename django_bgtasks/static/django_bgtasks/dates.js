/*
 * django-bgtasks: a time written as Django writes it (django.utils.dateformat),
 * for live.js, so that a time it writes looks like the ones the server wrote.
 *
 * window.bgtasksDates.format(iso, settings) writes the instant ``iso`` (as
 * the JSON API has it) in settings.format (Django's DATETIME_FORMAT for the
 * page's language) and time zone, with Django's translated month and day
 * names; the admin hands the settings over in the page (json_script
 * "bgtasks-dates", django_bgtasks/admin/formats.py). The format characters
 * are Django's: a A b c d D e E f F g G h H i I j l L m M n N o O P r s S t
 * T u U w W y Y z Z, and a backslash escapes the next character.
 *
 * No build step: plain ES2017, loaded before live.js.
 */
"use strict";
window.bgtasksDates = (function () {
  const CHARS = /\\(.)|([aAbcdDeEfFgGhHiIjlLmMnNoOPrsStTUuwWyYzZ])/g;
  const RFC_DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
  const RFC_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

  function pad(number, width) {
    return String(number).padStart(width || 2, "0");
  }

  // The zone's UTC offset at instant ms, in seconds: from Intl, else the one
  // the server named (a fixed offset), else the browser's own.
  function offsetAt(ms, settings) {
    try {
      const format = new Intl.DateTimeFormat("en-US", {
        timeZone: settings.zone, hourCycle: "h23", year: "numeric", month: "numeric",
        day: "numeric", hour: "numeric", minute: "numeric", second: "numeric",
      });
      const part = {};
      for (const { type, value } of format.formatToParts(new Date(ms))) part[type] = Number(value);
      const local = Date.UTC(part.year, part.month - 1, part.day, part.hour, part.minute, part.second);
      return Math.round((local - Math.floor(ms / 1000) * 1000) / 1000);
    } catch (error) {
      const zones = settings.zones || [];
      return zones.length ? zones[0][0] : -new Date(ms).getTimezoneOffset() * 60;
    }
  }

  // Monday is 0, as Python's weekday().
  function weekday(d) {
    return (d.getUTCDay() + 6) % 7;
  }

  // The ISO week and its year: those of the week's Thursday.
  function isoWeek(d) {
    const thursday = new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 3 - weekday(d)));
    const year = thursday.getUTCFullYear();
    return { year, week: 1 + Math.floor((thursday - Date.UTC(year, 0, 1)) / 86400000 / 7) };
  }

  function offsetText(seconds, colon) {
    const sign = seconds < 0 ? "-" : "+";
    const whole = Math.abs(seconds);
    return sign + pad(Math.floor(whole / 3600)) + (colon ? ":" : "") + pad(Math.floor(whole / 60) % 60);
  }

  function format(iso, settings) {
    const ms = Date.parse(iso);
    if (Number.isNaN(ms)) return "";
    const fraction = /T[^.]*\.(\d+)/.exec(iso);
    const micro = fraction ? Number((fraction[1] + "000000").slice(0, 6)) : 0;
    const offset = offsetAt(ms, settings);
    const d = new Date(Math.floor(ms / 1000) * 1000 + offset * 1000); // read with getUTC*
    const zone = (settings.zones || []).find((state) => state[0] === offset);
    const words = settings.words;
    const year = d.getUTCFullYear();
    const month = d.getUTCMonth(); // 0-11
    const day = d.getUTCDate();
    const hour = d.getUTCHours();
    const minute = d.getUTCMinutes();
    const second = d.getUTCSeconds();
    const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
    const f = () => String(hour % 12 || 12) + (minute ? ":" + pad(minute) : "");
    const a = () => (hour > 11 ? words["p.m."] : words["a.m."]);
    const iso8601 = () =>
      pad(year, 4) + "-" + pad(month + 1) + "-" + pad(day) + "T" + pad(hour) + ":" + pad(minute) +
      ":" + pad(second) + (micro ? "." + pad(micro, 6) : "") + offsetText(offset, true);
    const CHAR = {
      a,
      A: () => (hour > 11 ? words.PM : words.AM),
      b: () => settings.months3[month],
      c: iso8601,
      d: () => pad(day),
      D: () => settings.weekdaysAbbr[weekday(d)],
      e: () => (zone ? zone[1] : ""),
      E: () => settings.monthsAlt[month],
      f,
      F: () => settings.months[month],
      g: () => String(hour % 12 || 12),
      G: () => String(hour),
      h: () => pad(hour % 12 || 12),
      H: () => pad(hour),
      i: () => pad(minute),
      I: () => (zone && zone[2] ? "1" : "0"),
      j: () => String(day),
      l: () => settings.weekdays[weekday(d)],
      L: () => (leap ? "True" : "False"),
      m: () => pad(month + 1),
      M: () => {
        const name = settings.months3[month];
        return name.charAt(0).toUpperCase() + name.slice(1);
      },
      n: () => String(month + 1),
      N: () => settings.monthsAP[month],
      o: () => String(isoWeek(d).year),
      O: () => offsetText(offset, false),
      P: () => {
        if (minute === 0 && hour === 0) return words.midnight;
        if (minute === 0 && hour === 12) return words.noon;
        return f() + " " + a();
      },
      r: () =>
        RFC_DAYS[weekday(d)] + ", " + pad(day) + " " + RFC_MONTHS[month] + " " + pad(year, 4) + " " +
        pad(hour) + ":" + pad(minute) + ":" + pad(second) + " " + offsetText(offset, false),
      s: () => pad(second),
      S: () => {
        if (day >= 11 && day <= 13) return "th";
        return { 1: "st", 2: "nd", 3: "rd" }[day % 10] || "th";
      },
      t: () => String(new Date(Date.UTC(year, month + 1, 0)).getUTCDate()),
      T: () => (zone ? zone[1] : ""),
      u: () => pad(micro, 6),
      U: () => String(Math.floor(ms / 1000)),
      w: () => String(d.getUTCDay()),
      W: () => String(isoWeek(d).week),
      y: () => pad(year % 100),
      Y: () => pad(year, 4),
      z: () => String(Math.round((Date.UTC(year, month, day) - Date.UTC(year, 0, 1)) / 86400000) + 1),
      Z: () => String(offset),
    };
    return settings.format.replace(CHARS, (match, escaped, char) => (escaped !== undefined ? escaped : CHAR[char]()));
  }

  return { format };
})();
