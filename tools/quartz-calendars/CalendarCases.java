// Quartz 2.3.2's own answers for its calendars: for each calendar below, in each
// zone, whether Calendar.isTimeIncluded is true at instants over 2026: every
// 11 h 17 min, every 10 minutes for 3 hours either side of each of the zone's
// DST shifts, and around the start of the 1st of each month (-1, 0, +1,
// +999 and +1000 ms).
//
//   javac -cp /usr/share/java/quartz2.jar CalendarCases.java
//   java -cp /usr/share/java/quartz2.jar:. CalendarCases > calendar-quartz-cases.tsv
//
// Debian's libquartz2-java is Quartz 2.3.2. Output, per zone: a line
// "instants ZONE t1,t2,..." (epoch ms), then per calendar "case ZONE SPEC
// bits", one 0/1 per instant.
// A spec is a chain "a>b" (a on top of its base b) of: holiday:DATE,...
// annual:MM-DD,...  monthly:D,...  weekly:DAY,... (SUN..SAT)
// daily:HH:MM:SS:mmm-HH:MM:SS:mmm (daily!: inverted)  cron:EXPR
import java.util.*;
import org.quartz.impl.calendar.*;

public class CalendarCases {
    static final String[] SPECS = {
        "holiday:2026-12-25,2027-01-01,2026-03-08,2026-03-29,2026-10-25,2026-11-01,2026-04-05",
        "annual:12-25,01-01,02-29,07-04,03-08,11-01",
        "monthly:1,15,29,30,31",
        "weekly:SAT,SUN",
        "weekly:MON,WED,FRI",
        "daily:09:00:00:000-17:30:00:000",
        "daily!:09:00:00:000-17:30:00:000",
        "daily:01:30:00:000-02:30:00:000",
        "daily!:00:00:00:000-23:59:59:999",
        "cron:* * 0-7 ? * MON-FRI",
        "cron:* 0-29 * * * ?",
        "weekly:SAT,SUN>holiday:2026-12-25,2027-01-01",
        "daily:12:00:00:000-13:00:00:000>weekly:SAT,SUN>annual:12-25",
        "cron:* * 2 * * ?>monthly:1",
    };
    static final String[] ZONES = {"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe"};
    static final String[] DAYS = {"", "SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

    static org.quartz.Calendar build(String spec, TimeZone tz) throws Exception {
        String[] chain = spec.split(">");
        org.quartz.Calendar base = null;
        for (int i = chain.length - 1; i >= 0; i--) {
            base = one(chain[i], tz, base);
        }
        return base;
    }

    static java.util.Calendar day(String ymd, TimeZone tz) {
        String[] p = ymd.split("-");
        java.util.Calendar c = java.util.Calendar.getInstance(tz);
        c.clear();
        c.set(Integer.parseInt(p[0]), Integer.parseInt(p[1]) - 1, Integer.parseInt(p[2]), 12, 0, 0);
        return c;
    }

    static org.quartz.Calendar one(String spec, TimeZone tz, org.quartz.Calendar base) throws Exception {
        String kind = spec.substring(0, spec.indexOf(':'));
        String arg = spec.substring(spec.indexOf(':') + 1);
        switch (kind) {
            case "holiday": {
                HolidayCalendar c = new HolidayCalendar(base, tz);
                for (String d : arg.split(",")) c.addExcludedDate(day(d, tz).getTime());
                return c;
            }
            case "annual": {
                AnnualCalendar c = new AnnualCalendar(base, tz);
                for (String d : arg.split(",")) c.setDayExcluded(day("2000-" + d, tz), true);
                return c;
            }
            case "monthly": {
                MonthlyCalendar c = new MonthlyCalendar(base, tz);
                for (String d : arg.split(",")) c.setDayExcluded(Integer.parseInt(d), true);
                return c;
            }
            case "weekly": {
                WeeklyCalendar c = new WeeklyCalendar(base, tz);
                c.setDayExcluded(java.util.Calendar.SUNDAY, false);
                c.setDayExcluded(java.util.Calendar.SATURDAY, false);
                for (String d : arg.split(",")) c.setDayExcluded(Arrays.asList(DAYS).indexOf(d), true);
                return c;
            }
            case "daily":
            case "daily!": {
                String[] r = arg.split("-");
                DailyCalendar c = new DailyCalendar(base, r[0], r[1]);
                c.setTimeZone(tz);
                c.setInvertTimeRange(kind.equals("daily!"));
                return c;
            }
            case "cron": {
                CronCalendar c = new CronCalendar(base, arg, tz);
                return c;
            }
        }
        throw new IllegalArgumentException(spec);
    }

    public static void main(String[] a) throws Exception {
        long start = 1767225600000L; // 2026-01-01T00:00:00Z
        long end = start + 365L * 86400000L;
        System.out.println("# Quartz 2.3.2's Calendar.isTimeIncluded, by tools/quartz-calendars/CalendarCases.java");
        for (String zone : ZONES) {
            TimeZone tz = TimeZone.getTimeZone(zone);
            TreeSet<Long> instants = new TreeSet<>();
            for (long t = start; t < end; t += (11L * 60 + 17) * 60000L) instants.add(t);
            for (long t = start; t < end; t += 60000L) {
                if (tz.getOffset(t) != tz.getOffset(t + 60000L)) {
                    for (long u = t - 3 * 3600000L; u < t + 3 * 3600000L; u += 600000L) instants.add(u);
                    instants.add(t);
                    instants.add(t + 60000L);
                }
            }
            java.util.Calendar month = java.util.Calendar.getInstance(tz);
            month.clear();
            month.set(2026, 0, 1, 0, 0, 0);
            for (int m = 0; m < 12; m++) {
                long d = month.getTimeInMillis();
                for (long off : new long[] {-1, 0, 1, 999, 1000}) instants.add(d + off);
                month.add(java.util.Calendar.MONTH, 1);
            }
            StringBuilder line = new StringBuilder("instants\t" + zone + "\t");
            for (long t : instants) line.append(t).append(',');
            line.setLength(line.length() - 1);
            System.out.println(line);
            for (String spec : SPECS) {
                org.quartz.Calendar c = build(spec, tz);
                StringBuilder bits = new StringBuilder();
                for (long t : instants) bits.append(c.isTimeIncluded(t) ? '1' : '0');
                System.out.println("case\t" + zone + "\t" + spec + "\t" + bits);
            }
        }
    }
}
